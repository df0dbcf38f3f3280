//! Operator commands: what an operator runs against a connector besides `run` — moving or reading
//! its position (`offsets`) and checking what its files reach (`validate`). They sit above the
//! task loop and use it (opening the source, reading the offsets topic); the task loop never
//! calls them. (`verify` stays in `runtime`: resync and the background audit are built on it.)

mod offsets;
mod validate;

pub use offsets::{reset, set, show_offsets};
pub use validate::{validate_online, validate_tables};
