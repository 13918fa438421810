//! Where a measuring subcommand keeps its servers' data and writes its result:
//! the options and the writing shared by `memory`, `scale` and `storm`.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::memory::upsert_section;

/// `--data-root`, `--report` and `--markdown`.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Where the servers keep their data (a temporary directory is made inside).
    #[arg(long)]
    pub data_root: Option<PathBuf>,
    /// Write the JSON result here (default: stdout).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Also write the result as a section of this Markdown file (replacing the
    /// section of an earlier run; the rest of the file is kept).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
}

impl OutputArgs {
    /// A fresh temporary directory under `--data-root` (default: the system's).
    pub fn temp_dir(&self, prefix: &str) -> std::io::Result<tempfile::TempDir> {
        let root = self.data_root.clone().unwrap_or_else(std::env::temp_dir);
        tempfile::Builder::new().prefix(prefix).tempdir_in(&root)
    }

    /// Writes `result` as JSON to `--report` (or stdout) and, with
    /// `--markdown`, `section()` as the Markdown section named `name`.
    pub fn write(
        &self,
        result: &impl Serialize,
        name: &str,
        section: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(result)?;
        match &self.report {
            Some(path) => std::fs::write(path, &json)?,
            None => println!("{json}"),
        }
        if let Some(path) = &self.markdown {
            let old = std::fs::read_to_string(path).unwrap_or_default();
            std::fs::write(path, upsert_section(&old, name, &section()))?;
            eprintln!("{name}: wrote the section into {}", path.display());
        }
        Ok(())
    }
}
