//! Writing a large file without one large flush at the end.

use std::fs::File;
use std::io::{self, Write};

/// Writes to a file and syncs its data every `every` bytes, resting after each
/// sync as long as it took.
///
/// A snapshot of a million holdings is about 110 MiB. Written whole and then
/// synced, the kernel flushes all of it at once, and the log's own syncs (two
/// per lock cycle) queue behind that flush on the same disk. Synced in steps,
/// each flush is short and the log's syncs slip in between.
///
/// Until session 48 the steps were not taken: the state's bytes reach this
/// writer as one buffer (a `BufWriter` passes a large `write_all` straight
/// through), which one `write` call took whole, so the 110 MiB were still
/// synced at once. The log's syncs then took 11-61 ms and lock cycles stalled
/// for about 0.4 s at the end of every snapshot build (the scale benchmark at a
/// million held). Now each `write` stops at the next step, 1 MiB, and each
/// sync is followed by a rest as long as it took, so the disk stays idle for
/// others half of the time (BENCHMARKS.md, "Snapshot writes and the log's
/// syncs").
#[derive(Debug)]
pub(crate) struct PacedSync {
    file: File,
    every: u64,
    unsynced: u64,
    /// Syncs so far (before `finish`).
    syncs: u64,
}

impl PacedSync {
    /// Wraps `file`; `every == 0` never syncs (an unsynced store).
    pub(crate) fn new(file: File, every: u64) -> Self {
        PacedSync {
            file,
            every,
            unsynced: 0,
            syncs: 0,
        }
    }

    /// Syncs what is left and returns the file.
    pub(crate) fn finish(self, sync: bool) -> io::Result<File> {
        if sync {
            self.file.sync_all()?;
        }
        Ok(self.file)
    }
}

impl Write for PacedSync {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // At most up to the next sync: a large buffer (the snapshot's body
        // comes in one `write_all`, which a `BufWriter` passes straight
        // through) would otherwise be written, then synced, whole.
        let buf = match self.every {
            0 => buf,
            every => {
                let room = every.saturating_sub(self.unsynced).max(1);
                &buf[..buf.len().min(usize::try_from(room).unwrap_or(usize::MAX))]
            }
        };
        let written = self.file.write(buf)?;
        self.unsynced += written as u64;
        if self.every > 0 && self.unsynced >= self.every {
            let started = std::time::Instant::now();
            self.file.sync_data()?;
            self.unsynced = 0;
            self.syncs += 1;
            // As long again with the disk left to others: the slower the disk
            // is right now, the longer the rest.
            std::thread::sleep(started.elapsed());
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{BufWriter, Read};

    use super::*;

    #[test]
    fn what_is_written_in_steps_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..100_000u32).flat_map(u32::to_le_bytes).collect();
        let mut out =
            BufWriter::with_capacity(4096, PacedSync::new(File::create(&path).unwrap(), 10_000));
        out.write_all(&data).unwrap();
        let paced = out.into_inner().map_err(|e| e.into_error()).unwrap();
        // Every full step was synced: fewer bytes than one step wait.
        assert!(paced.unsynced < 10_000 + 4096, "{}", paced.unsynced);
        drop(paced.finish(true).unwrap());
        let mut back = Vec::new();
        File::open(&path).unwrap().read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
    }

    /// The snapshot's body reaches `PacedSync` as one buffer of its whole
    /// size: before the cap, it was written and synced in one piece.
    #[test]
    fn one_large_write_is_synced_in_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data = vec![5u8; 100_000];
        let mut out =
            BufWriter::with_capacity(4096, PacedSync::new(File::create(&path).unwrap(), 10_000));
        out.write_all(&data).unwrap();
        let paced = out.into_inner().map_err(|e| e.into_error()).unwrap();
        assert_eq!(paced.syncs, 10, "one sync per 10,000 bytes");
        drop(paced.finish(true).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    #[test]
    fn a_zero_step_never_syncs_on_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let mut paced = PacedSync::new(File::create(dir.path().join("f")).unwrap(), 0);
        paced.write_all(&[7; 50_000]).unwrap();
        assert_eq!(paced.unsynced, 50_000);
    }
}
