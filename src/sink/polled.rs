//! A producer whose events (delivery reports, statistics, token refreshes) are served by a thread
//! that sleeps until librdkafka has one. rust-rdkafka's `ThreadedProducer` wakes its thread every
//! 100 ms to look for a stop flag: on an idle connector that was 85 % of its CPU (0.55 of 0.62 CPU
//! seconds a minute, issue 32). Here the thread waits on the event queue for up to
//! [`SAFETY_WAKE`] and is asked to stop by `rd_kafka_yield` and a flag; it is not waited for. An
//! event still wakes it at once: delivery reports are no later than before. (Serving the queue
//! from a Tokio task woken through `rd_kafka_queue_io_event_enable` instead, which would save the
//! thread, hung: a task producing into a full queue spins on its worker while delivery reports
//! wait for a task on the same worker.)

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{BaseProducer, Producer, ProducerContext};

/// How long the thread waits for an event before it looks at the stop flag anyway.
const SAFETY_WAKE: Duration = Duration::from_secs(5);

pub struct Polled<C: ProducerContext + 'static> {
    producer: Arc<BaseProducer<C>>,
    stop: Arc<AtomicBool>,
}

impl<C: ProducerContext + 'static> Polled<C> {
    pub fn new(producer: BaseProducer<C>) -> std::io::Result<Self> {
        let producer = Arc::new(producer);
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (producer.clone(), stop.clone());
        // not joined (see Drop): its handle is not kept
        std::thread::Builder::new().name("kafka-events".into()).spawn(move || {
            while !s.load(Ordering::Acquire) {
                p.poll(SAFETY_WAKE);
            }
        })?;
        Ok(Polled { producer, stop })
    }
}

impl<C: ProducerContext + 'static> Deref for Polled<C> {
    type Target = BaseProducer<C>;

    fn deref(&self) -> &BaseProducer<C> {
        &self.producer
    }
}

impl<C: ProducerContext + 'static> Drop for Polled<C> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // SAFETY: the client handle is alive (held by `self.producer` and the thread); yield
        // only flags the client's event queue
        unsafe { rdkafka::bindings::rd_kafka_yield(self.producer.client().native_ptr()) };
        // the thread is not joined: the yield does not always end the wait in progress (a
        // stopping `run --once` waited 4.5 s for it), and nothing waits on the thread; it ends
        // within SAFETY_WAKE, the last holder of the producer
    }
}
