//! Writing a large file without one large flush at the end.

use std::fs::File;
use std::io::{self, Write};

/// Writes to a file and syncs its data every `every` bytes.
///
/// A snapshot of a million holdings is about 100 MiB. Written whole and then
/// synced, the kernel flushes all of it at once, and the log's own syncs (two
/// per lock cycle) queue behind that flush on the same disk: the scale
/// benchmark's lock-cycle p99 rose with every snapshot. Synced in steps, each
/// flush is short and the log's syncs slip in between.
#[derive(Debug)]
pub(crate) struct PacedSync {
    file: File,
    every: u64,
    unsynced: u64,
}

impl PacedSync {
    /// Wraps `file`; `every == 0` never syncs (an unsynced store).
    pub(crate) fn new(file: File, every: u64) -> Self {
        PacedSync {
            file,
            every,
            unsynced: 0,
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
        let written = self.file.write(buf)?;
        self.unsynced += written as u64;
        if self.every > 0 && self.unsynced >= self.every {
            self.file.sync_data()?;
            self.unsynced = 0;
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

    #[test]
    fn a_zero_step_never_syncs_on_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let mut paced = PacedSync::new(File::create(dir.path().join("f")).unwrap(), 0);
        paced.write_all(&[7; 50_000]).unwrap();
        assert_eq!(paced.unsynced, 50_000);
    }
}
