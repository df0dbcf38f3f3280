//! The memory allocator of every lakestream process (the binaries, benchmarks and tests link
//! this library): **jemalloc** (`tikv-jemallocator`, the allocator TiKV, Materialize and Vector
//! ship), configured below to hand freed pages back to the system within 100 ms from a
//! background thread. With glibc's malloc a long full scan or change unit kept growing its
//! resident set from fragmentation across reader threads' arenas (the peak RSS measured with
//! each: docs/benchmarks.md, memory). Operators can override the configuration with the
//! `_RJEM_MALLOC_CONF` environment variable.

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's `malloc_conf` (read once at start): purge freed pages after 100 ms from a
/// background thread instead of keeping them 10 s.
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: ConfPtr = ConfPtr(c"background_thread:true,dirty_decay_ms:100,muzzy_decay_ms:0".as_ptr());

#[repr(transparent)]
struct ConfPtr(*const std::ffi::c_char);
// SAFETY: points at an immutable static string
unsafe impl Sync for ConfPtr {}
