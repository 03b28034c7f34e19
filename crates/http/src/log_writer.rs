//! The log writer thread's output: lines buffered and written in batches, at most
//! [`LOG_LINGER`] after they were logged.
//!
//! tracing-appender's writer thread drains its queue into this writer and flushes it whenever
//! the queue is empty, then sleeps until the next line wakes it. Under load (one access-log
//! line per request) that made one `write` per line and one wake-up of the thread per line,
//! paid partly by the request's own thread. Here a flush first waits [`LOG_LINGER`], so the
//! lines of that time go out in one `write` and the thread is awake (never parked) while they
//! come: no wake-up per line (docs/performance.md).
//!
//! The cost: a line reaches the output up to [`LOG_LINGER`] later, and a process killed hard
//! loses at most that much more of its last lines. A normal shutdown writes every line.

use std::io::{self, Write};
use std::time::Duration;

/// How long a flush waits for more lines before writing them.
pub const LOG_LINGER: Duration = Duration::from_millis(5);

/// Buffers lines for `inner` and writes them at a flush, [`LOG_LINGER`] after the first.
#[derive(Debug)]
pub struct LingeringWriter<W: Write> {
    inner: io::BufWriter<W>,
    /// Whether lines were written since the last flush.
    pending: bool,
}

impl<W: Write> LingeringWriter<W> {
    /// Lines for `inner`, buffered up to `capacity` bytes (written at once when more come).
    pub fn new(capacity: usize, inner: W) -> Self {
        Self { inner: io::BufWriter::with_capacity(capacity, inner), pending: false }
    }
}

impl<W: Write> Write for LingeringWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending = true;
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.pending) {
            std::thread::sleep(LOG_LINGER);
        }
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records each `write` it gets.
    #[derive(Clone, Default)]
    struct Writes(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().push(buf.to_vec());
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_go_out_together_at_a_flush_after_the_linger() {
        let writes = Writes::default();
        let mut writer = LingeringWriter::new(1024, writes.clone());
        writer.write_all(b"one\n").unwrap();
        writer.write_all(b"two\n").unwrap();
        assert!(writes.0.lock().unwrap().is_empty(), "nothing written before a flush");
        let started = std::time::Instant::now();
        writer.flush().unwrap();
        assert!(started.elapsed() >= LOG_LINGER);
        assert_eq!(*writes.0.lock().unwrap(), vec![b"one\ntwo\n".to_vec()]);
        // Nothing new: a flush neither waits nor writes.
        let started = std::time::Instant::now();
        writer.flush().unwrap();
        assert!(started.elapsed() < LOG_LINGER);
        assert_eq!(writes.0.lock().unwrap().len(), 1);
    }
}
