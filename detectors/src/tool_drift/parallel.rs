//! Per-tool work of a long list spread over the machine's cores.
//!
//! Digesting a tool and building its normal form read only that tool, so a list's tools can be split in
//! contiguous runs, one per thread, and their results put back in list order: the outcome is the same
//! whatever the number of threads. Short lists stay on the calling thread (a thread costs tens of
//! microseconds to start; a tool's digest a few).

/// Below this many tools to work on, the calling thread does them all.
pub(super) const PARALLEL_FROM: usize = 256;

/// The threads a list of `count` tools is split over: one below [`PARALLEL_FROM`], else the machine's cores.
pub(super) fn threads_for(count: usize) -> usize {
    if count < PARALLEL_FROM {
        return 1;
    }
    cores()
}

/// The machine's cores, read once: `available_parallelism` reads the cgroup's quota files at every call.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |cores| cores.get()))
}

/// `each(i, scratch)` for every `i` in `0..count`, in order, over up to `threads` threads (each with a
/// scratch buffer of its own). A thread the system will not start leaves its run to the calling thread.
pub(super) fn map_ordered<T: Send>(
    count: usize,
    threads: usize,
    each: impl Fn(usize, &mut String) -> T + Sync,
) -> Vec<T> {
    let run = |range: std::ops::Range<usize>| {
        let mut scratch = String::new();
        range.map(|i| each(i, &mut scratch)).collect::<Vec<T>>()
    };
    let threads = threads.clamp(1, count.max(1));
    if threads == 1 {
        return run(0..count);
    }
    let per_thread = count.div_ceil(threads);
    let ranges: Vec<_> = (0..threads).map(|t| t * per_thread..((t + 1) * per_thread).min(count)).collect();
    std::thread::scope(|scope| {
        let run = &run;
        // The first run is the calling thread's own.
        let spawned: Vec<_> = ranges[1..]
            .iter()
            .map(|range| {
                let range = range.clone();
                (range.clone(), std::thread::Builder::new().spawn_scoped(scope, move || run(range)))
            })
            .collect();
        let mut out = run(ranges[0].clone());
        for (range, handle) in spawned {
            match handle {
                // A panic in a run is a bug: it goes on in the caller as it would have without threads.
                Ok(handle) => {
                    out.extend(handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                }
                Err(_) => out.extend(run(range)),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Results come back in order whatever the split: uneven runs, more threads than items, none.
    #[test]
    fn maps_in_order_over_any_number_of_threads() {
        for count in [0, 1, 2, 7, 300, 1_001] {
            let serial: Vec<usize> = (0..count).map(|i| i * 3).collect();
            for threads in [1, 2, 3, 8, 2_000] {
                let mapped = map_ordered(count, threads, |i, scratch| {
                    scratch.push('x');
                    i * 3
                });
                assert_eq!(mapped, serial, "{count} items over {threads} threads");
            }
        }
    }

    #[test]
    fn short_lists_stay_on_one_thread() {
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        assert_eq!(threads_for(PARALLEL_FROM - 1), 1);
        assert_eq!(threads_for(PARALLEL_FROM), cores, "a long list takes every core");
    }
}
