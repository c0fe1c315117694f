//! Where the log's bytes go: the file's length, what it occupies on disk, and what redb
//! holds per table. The file's length alone misleads: until redb's first region is
//! full (4 GiB with 4 kB pages) it grows the file by doubling it (`set_len`, so the
//! new half is a hole that uses no disk until written), and so `length / events` jumps
//! by 2x at every power of two while the data per event stays the same.

use std::os::unix::fs::MetadataExt;

use redb::{ReadableTableMetadata, TableHandle};

use super::*;

/// What one table holds (keys and values, then redb's own index pages of it).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableSpace {
    pub table: String,
    pub rows: u64,
    pub stored_bytes: u64,
    pub metadata_bytes: u64,
    pub fragmented_bytes: u64,
}

/// The log's space, for the daemon benchmark and for people who wonder.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Space {
    /// The file's length.
    pub file_bytes: u64,
    /// What the file occupies on disk (allocated blocks; holes excluded).
    pub disk_bytes: u64,
    /// Keys and values in all tables.
    pub stored_bytes: u64,
    pub metadata_bytes: u64,
    pub fragmented_bytes: u64,
    pub tables: Vec<TableSpace>,
}

impl Store {
    pub fn space(&self) -> Result<Space, StoreError> {
        let meta = std::fs::metadata(&self.path).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let mut tables = Vec::new();
        macro_rules! table {
            ($($def:expr),*) => {$(
                let t = tx.open_table($def).map_err(|e| self.err(e))?;
                let s = t.stats().map_err(|e| self.err(e))?;
                tables.push(TableSpace {
                    table: $def.name().to_string(),
                    rows: t.len().map_err(|e| self.err(e))?,
                    stored_bytes: s.stored_bytes(),
                    metadata_bytes: s.metadata_bytes(),
                    fragmented_bytes: s.fragmented_bytes(),
                });
            )*};
        }
        table!(EVENTS, GOAL_EVENTS, GOALS, EVALS, SOURCES, SLURM_JOBS, META);
        table!(goal_index::ACTIVE, goal_index::FINISHED);
        let sum = |f: fn(&TableSpace) -> u64| tables.iter().map(f).sum();
        Ok(Space {
            file_bytes: meta.len(),
            disk_bytes: meta.blocks() * 512,
            stored_bytes: sum(|t| t.stored_bytes),
            metadata_bytes: sum(|t| t.metadata_bytes),
            fragmented_bytes: sum(|t| t.fragmented_bytes),
            tables,
        })
    }
}
