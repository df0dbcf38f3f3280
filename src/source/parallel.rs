//! Ordered parallel reading: splits are read by a few threads, results handed on in split order,
//! at most `window` results ahead of the consumer (bounded memory). The window's lock is
//! `parking_lot`'s: no poisoning to handle (see CONTRIBUTING).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use parking_lot::{Condvar, Mutex};

use super::SourceError;

/// Threads to read with: `LAKESTREAM_READ_THREADS`, else the number of cores.
pub fn default_threads() -> usize {
    std::env::var("LAKESTREAM_READ_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
        .max(1)
}

/// `read(i)` for every `i < n` on up to `threads` threads; `sink` gets the results in order of
/// `i`. The first error (from either) stops everything and is returned.
pub fn ordered<R: Send>(
    n: usize,
    threads: usize,
    read: &(dyn Fn(usize) -> Result<R, SourceError> + Sync),
    sink: &mut dyn FnMut(R) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    ordered_window(n, threads, threads * 2, read, sink)
}

/// [`ordered`], with reading at most `window` results ahead of the one `sink` takes next (a
/// result is large: a window of `threads` keeps each thread on one).
pub fn ordered_window<R: Send>(
    n: usize,
    threads: usize,
    window: usize,
    read: &(dyn Fn(usize) -> Result<R, SourceError> + Sync),
    sink: &mut dyn FnMut(R) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    let threads = threads.clamp(1, n.max(1));
    if threads == 1 {
        for i in 0..n {
            sink(read(i)?)?;
        }
        return Ok(());
    }
    let window = window.max(1);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let emitted = Mutex::new(0usize);
    let moved = Condvar::new();
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<(usize, Result<R, SourceError>)>();
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop, emitted, moved) = (&next, &stop, &emitted, &moved);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n || stop.load(Ordering::SeqCst) {
                    return;
                }
                {
                    let mut e = emitted.lock();
                    while i >= *e + window && !stop.load(Ordering::SeqCst) {
                        moved.wait(&mut e);
                    }
                }
                if stop.load(Ordering::SeqCst) || tx.send((i, read(i))).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut pending: BTreeMap<usize, Result<R, SourceError>> = BTreeMap::new();
        let mut want = 0usize;
        let result = (|| {
            while want < n {
                let Ok((i, r)) = rx.recv() else { break };
                pending.insert(i, r);
                while let Some(r) = pending.remove(&want) {
                    sink(r?)?;
                    want += 1;
                    *emitted.lock() = want;
                    moved.notify_all();
                }
            }
            Ok(())
        })();
        stop.store(true, Ordering::SeqCst);
        moved.notify_all();
        drop(rx);
        result
    })
}

/// A part of a streamed item, or its end.
enum Msg<R> {
    Part(R),
    End,
    Failed(SourceError),
}

/// Items are streamed by `produce(i, send)` for every `i < n` on up to `threads` threads (each
/// item in several parts, in order); `sink` gets every part of item 0, then of item 1, ... Each
/// item's parts wait in a queue of `depth`, and an item is begun only within `threads` items of
/// the one `sink` takes from, so at most `threads × (depth + 1)` parts are held. (Without that
/// window an item whose parts all fit its queue freed its thread for the next: a full scan of
/// small files read the whole table ahead of the producer — 300 MiB held at 4M rows, 1.26 GiB
/// at 16M.) The first error (from either side) stops everything and is returned.
pub fn ordered_streams<R: Send>(
    n: usize,
    threads: usize,
    depth: usize,
    produce: &Produce<'_, R>,
    sink: &mut dyn FnMut(R) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    let threads = threads.clamp(1, n.max(1));
    if threads == 1 {
        for i in 0..n {
            produce(i, sink)?;
        }
        return Ok(());
    }
    let mut senders = Vec::with_capacity(n);
    let mut receivers = Vec::with_capacity(n);
    for _ in 0..n {
        let (tx, rx) = mpsc::sync_channel::<Msg<R>>(depth.max(1));
        senders.push(Mutex::new(Some(tx)));
        receivers.push(rx);
    }
    let shared = Streams {
        senders,
        next: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        taking: Mutex::new(0),
        moved: Condvar::new(),
        n,
        threads,
    };
    std::thread::scope(|scope| {
        let shared = &shared;
        for _ in 0..threads {
            scope.spawn(move || shared.work(produce));
        }
        let result = shared.take(&receivers, sink);
        shared.stop.store(true, Ordering::SeqCst);
        shared.moved.notify_all();
        drop(receivers); // a producer blocked on a full queue sees the end
        result
    })
}

/// Streams `i` of `0..n` by `produce(i, send)` (see [`ordered_streams`]).
type Produce<'a, R> =
    dyn Fn(usize, &mut dyn FnMut(R) -> Result<(), SourceError>) -> Result<(), SourceError> + Sync + 'a;

/// What the threads of [`ordered_streams`] share.
struct Streams<R> {
    /// Each item's queue, taken by the thread that streams it.
    senders: Vec<Mutex<Option<mpsc::SyncSender<Msg<R>>>>>,
    next: AtomicUsize,
    stop: AtomicBool,
    /// The item the sink takes parts from.
    taking: Mutex<usize>,
    moved: Condvar,
    n: usize,
    threads: usize,
}

impl<R: Send> Streams<R> {
    /// One thread's loop: items are claimed in order (so the one the sink waits for is always in
    /// hand), each begun only within `threads` items of the one the sink takes from.
    fn work(&self, produce: &Produce<'_, R>) {
        loop {
            let i = self.next.fetch_add(1, Ordering::SeqCst);
            if i >= self.n || self.stop.load(Ordering::SeqCst) {
                return;
            }
            {
                let mut t = self.taking.lock();
                while i >= *t + self.threads && !self.stop.load(Ordering::SeqCst) {
                    self.moved.wait(&mut t);
                }
            }
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let Some(tx) = self.senders[i].lock().take() else {
                return;
            };
            let res = produce(i, &mut |part| {
                if self.stop.load(Ordering::SeqCst) {
                    return Err(SourceError::Stopped);
                }
                tx.send(Msg::Part(part)).map_err(|_| SourceError::Stopped)
            });
            let end = match res {
                Ok(()) => Msg::End,
                Err(e) => Msg::Failed(e),
            };
            if tx.send(end).is_err() {
                return;
            }
        }
    }

    /// The sink's side: every part of item 0, then of item 1, ...
    fn take(
        &self,
        receivers: &[mpsc::Receiver<Msg<R>>],
        sink: &mut dyn FnMut(R) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        for (i, rx) in receivers.iter().enumerate() {
            *self.taking.lock() = i;
            self.moved.notify_all();
            loop {
                match rx.recv() {
                    Ok(Msg::Part(p)) => sink(p)?,
                    Ok(Msg::End) => break,
                    Ok(Msg::Failed(e)) => return Err(e),
                    Err(_) => return Err(SourceError::Stopped),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_arrive_in_order_and_errors_stop() {
        let mut got = Vec::new();
        ordered(
            50,
            3,
            &|i| {
                std::thread::sleep(std::time::Duration::from_micros(((i * 7919) % 13) as u64 * 100));
                Ok(i)
            },
            &mut |r| {
                got.push(r);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(got, (0..50).collect::<Vec<_>>());
        let mut seen = 0;
        let err = ordered(
            50,
            2,
            &|i| {
                if i == 7 {
                    Err(SourceError::Unsupported { message: "x".into() })
                } else {
                    Ok(i)
                }
            },
            &mut |_| {
                seen += 1;
                Ok(())
            },
        );
        assert!(err.is_err());
        assert_eq!(seen, 7);
    }

    #[test]
    fn streamed_parts_arrive_in_item_order_and_errors_stop() {
        let produce = |i: usize, send: &mut dyn FnMut((usize, usize)) -> Result<(), SourceError>| {
            for k in 0..(i % 5) * 3 {
                std::thread::sleep(std::time::Duration::from_micros(((i * 31 + k) % 7) as u64 * 50));
                send((i, k))?;
            }
            if i == 23 {
                Err(SourceError::Unsupported { message: "boom".into() })
            } else {
                Ok(())
            }
        };
        let mut got = Vec::new();
        let err = ordered_streams(40, 3, 2, &produce, &mut |p| {
            got.push(p);
            Ok(())
        });
        assert!(matches!(err, Err(SourceError::Unsupported { ref message }) if message == "boom"));
        let want: Vec<(usize, usize)> = (0..=23).flat_map(|i| (0..(i % 5) * 3).map(move |k| (i, k))).collect();
        assert_eq!(got, want);
        let mut all = Vec::new();
        ordered_streams(30, 2, 1, &|i, send| send(i), &mut |p| {
            all.push(p);
            Ok(())
        })
        .unwrap();
        assert_eq!(all, (0..30).collect::<Vec<_>>());
    }

    /// Items of one part each (the parts of a full scan of small files) with a slow sink: the
    /// readers stay within `threads` items of it instead of reading everything ahead.
    #[test]
    fn streams_stay_within_a_window_of_the_sink() {
        let (threads, depth) = (2usize, 2usize);
        let made = AtomicUsize::new(0);
        let mut most = 0usize;
        let mut taken = 0usize;
        ordered_streams(
            60,
            threads,
            depth,
            &|i, send| {
                made.fetch_add(1, Ordering::SeqCst);
                send(i)
            },
            &mut |_| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                taken += 1;
                most = most.max(made.load(Ordering::SeqCst) - taken);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(taken, 60);
        assert!(most <= threads * (depth + 1), "{most} parts held ahead of the sink");
    }
}
