//! The two journal layouts issue 9 names, measured on sled alone: what
//! each costs per record when a flush covers a group of records, as group
//! commit gives with 1, 8 and 64 instances at once. No engine runs here:
//! one thread writes and flushes, so the figures are each layout's ceiling
//! on this disk, beside the raw insert+flush loop of the same run.
//!
//! - *record per insert* (the engine's layout): each record is one insert,
//!   keyed (instance, sequence number);
//! - *log, per-record index*: a flush's records are one insert, keyed by
//!   the log position, and each record also gets its (instance, sequence
//!   number) key pointing into the log, written without a flush of its own;
//! - *log, journals folded at the end*: a flush's records are one insert;
//!   an instance's whole journal is written as one value when it ends, and
//!   a log entry is removed once every instance in it has been folded.
//!
//! In each, an instance's status entry is rewritten when it starts and when
//! it ends.
//!
//! `cargo bench -p saga-runtime --bench journal_layouts`.

mod support;

use std::time::Instant;

use support::{Scratch, header, raw_loop, row, thousands};

/// Records per instance: created, three steps started and completed, ended.
const RECORDS_PER_INSTANCE: usize = 8;
/// A journal record's size, about what the benchmark workflow writes.
const RECORD_BYTES: usize = 100;
/// Records written per layout and group size.
const RECORDS: usize = 64_000;
/// Records per flush: group commit at about 1, 8 and 64 instances.
const GROUPS: [usize; 3] = [1, 8, 64];

/// How a layout stores a flush's worth of records.
#[derive(Clone, Copy)]
enum Layout {
    RecordPerInsert,
    LogWithIndex,
    LogFolded,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::RecordPerInsert => "record per insert",
            Layout::LogWithIndex => "log, per-record index",
            Layout::LogFolded => "log, folded at the end",
        }
    }
}

/// The key of an instance's record `seq`, as the sled store writes it.
fn record_key(instance: u64, seq: u64) -> Vec<u8> {
    let mut key = format!("instance-{instance:08}").into_bytes();
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn instance_key(instance: u64) -> Vec<u8> {
    format!("instance-{instance:08}").into_bytes()
}

/// Writes `RECORDS` records in flushes of `group` records: `group`
/// instances at once, each writing one record per flush and a new one
/// starting where one ends. Returns records per second.
fn run(layout: Layout, group: usize) -> f64 {
    let scratch = Scratch::new("layouts");
    let db = sled::open(scratch.path()).expect("open sled");
    let journal = db.open_tree("journal").expect("journal tree");
    let index = db.open_tree("index").expect("index tree");
    let log = db.open_tree("log").expect("log tree");
    let record = [7u8; RECORD_BYTES];
    // Each lane runs one instance after another; `seq` is where it is.
    let mut lanes: Vec<(u64, u64)> = (0..group as u64).map(|lane| (lane, 0)).collect();
    let mut next_instance = group as u64;
    // Folded layout: the journals being written, and the log entries that
    // still hold records of an unfolded instance (by log position).
    let mut journals: Vec<Vec<u8>> = vec![Vec::new(); group];
    let mut unfolded: std::collections::VecDeque<u64> = Default::default();
    let started = Instant::now();
    let flushes = RECORDS / group;
    for position in 0..flushes as u64 {
        let mut entry = Vec::with_capacity(group * RECORD_BYTES);
        for (lane, (instance, seq)) in lanes.iter_mut().enumerate() {
            // Every layout keeps a status entry per instance (for `list()`),
            // rewritten when the instance starts and when it ends.
            if *seq == 0 || *seq as usize == RECORDS_PER_INSTANCE - 1 {
                index
                    .insert(instance_key(*instance), &record[..32])
                    .expect("index");
            }
            match layout {
                Layout::RecordPerInsert => {
                    journal
                        .insert(record_key(*instance, *seq), &record[..])
                        .expect("insert");
                }
                Layout::LogWithIndex => {
                    entry.extend_from_slice(&record);
                    let pointer = [position.to_be_bytes(), (lane as u64).to_be_bytes()].concat();
                    journal
                        .insert(record_key(*instance, *seq), pointer)
                        .expect("index insert");
                }
                Layout::LogFolded => {
                    entry.extend_from_slice(&record);
                    journals[lane].extend_from_slice(&record);
                    if *seq as usize == RECORDS_PER_INSTANCE - 1 {
                        journal
                            .insert(instance_key(*instance), std::mem::take(&mut journals[lane]))
                            .expect("fold");
                    }
                }
            }
            *seq += 1;
            if *seq as usize == RECORDS_PER_INSTANCE {
                *instance = next_instance;
                *seq = 0;
                next_instance += 1;
            }
        }
        if !matches!(layout, Layout::RecordPerInsert) {
            log.insert(position.to_be_bytes(), entry)
                .expect("log insert");
        }
        db.flush().expect("flush");
        if let Layout::LogFolded = layout {
            // The folds just flushed free the log entries whose instances
            // have all ended: an entry holds `group` records, and its
            // instances end within `RECORDS_PER_INSTANCE` flushes.
            unfolded.push_back(position);
            while unfolded.len() > RECORDS_PER_INSTANCE {
                let old = unfolded.pop_front().expect("an entry");
                log.remove(old.to_be_bytes()).expect("log remove");
            }
        }
    }
    (flushes * group) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    if !support::wanted("journal_layouts") {
        return;
    }
    header(
        "journal layouts on sled alone: records/s when one flush covers a group of records. \
         (N.NNx raw) = records/s / the raw loop's writes/s, this run",
    );
    let raw = raw_loop(1).writes_per_second;
    row(
        "raw sled insert+flush, 1 writer",
        "writes/s",
        &thousands(raw),
        "(1.00x raw)",
    );
    for group in GROUPS {
        for layout in [
            Layout::RecordPerInsert,
            Layout::LogWithIndex,
            Layout::LogFolded,
        ] {
            let rate = run(layout, group);
            row(
                &format!("{}, {group}/flush", layout.name()),
                "records/s",
                &thousands(rate),
                &format!("({:.2}x raw)", rate / raw),
            );
        }
    }
}
