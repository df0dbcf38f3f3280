//! lakestream: an exactly-once changelog source connector from lakehouse tables to Kafka.
//!
//! Data flows one way: [`config`] → [`source`] (monitor, splits, readers) → [`changelog`]
//! (events, Avro, schema registry) → [`sink`] (transactional producer, offsets) → [`runtime`]
//! (task loop, boundaries, shutdown) → [`ops`] (operator commands: offsets, validate), with [`storage`], [`avro_binary`], [`metrics`], [`health`], [`error`] (what a failure means) and
//! [`causes`] on the ground floor.

mod alloc;
pub mod avro_binary;
pub mod causes;
pub mod changelog;
pub mod config;
pub mod error;
pub mod generate;
pub mod health;
pub mod metrics;
pub mod ops;
pub mod runtime;
pub mod sink;
pub mod source;
pub mod storage;
