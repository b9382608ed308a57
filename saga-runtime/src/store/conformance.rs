//! The behaviour every [`Store`] must have, as a suite any store runs
//! (`tests/store_conformance.rs` runs it against sled; a server-backed
//! store runs it against its own).

use super::{IndexRow, Store, StoreFuture};

/// One check: `Ok(Err(violation))` when the store breaks the contract.
type Check = for<'a> fn(&'a dyn Store) -> StoreFuture<'a, Result<(), String>>;

/// Runs the suite against stores made by `fresh` (each call an empty
/// store). Returns every violation found, or `Ok` when there is none.
#[doc(hidden)]
pub async fn run_conformance_suite<S, Fresh>(fresh: impl Fn() -> Fresh) -> Result<(), Vec<String>>
where
    S: Store,
    Fresh: std::future::Future<Output = S>,
{
    let mut violations = Vec::new();
    let checks: [(&str, Check); 9] = [
        ("create is once per id", create_is_once_per_id),
        ("appends read back in order", appends_read_back_in_order),
        (
            "journals of ids sharing a prefix stay apart",
            prefixes_stay_apart,
        ),
        (
            "the index holds one summary per instance",
            index_holds_summaries,
        ),
        ("remove takes journal and index", remove_takes_everything),
        (
            "a create cut short is taken over",
            create_cut_short_is_taken_over,
        ),
        ("a run reads and goes apart", runs_read_and_go_apart),
        (
            "queue limits change only by compare-and-swap",
            queue_limits_swap_whole,
        ),
        (
            "a kept timer index files each entry's wake",
            timers_file_wakes,
        ),
    ];
    for (name, check) in checks {
        let store = fresh().await;
        match check(&store).await {
            Ok(Ok(())) => {}
            Ok(Err(violation)) => violations.push(format!("{name}: {violation}")),
            Err(e) => violations.push(format!("{name}: the store failed: {e}")),
        }
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

fn row(summary: &[u8]) -> IndexRow<'_> {
    IndexRow::opaque(summary)
}

fn expect(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

fn create_is_once_per_id(store: &dyn Store) -> StoreFuture<'_, Result<(), String>> {
    Box::pin(async move {
        let first = store.create("a", &row(b"index-1"), b"record-1").await?;
        let second = store.create("a", &row(b"index-2"), b"record-2").await?;
        store.flush()?;
        let journal = store.journal("a").await?;
        let index = store.index("a").await?;
        Ok(expect(first && !second, || {
            format!("create answered {first} then {second}, expected true then false")
        })
        .and(expect(journal == [(0, b"record-1".to_vec())], || {
            format!("journal after two creates: {journal:?}")
        }))
        .and(expect(
            index.as_deref() == Some(b"index-1".as_slice()),
            || format!("index after two creates: {index:?}"),
        )))
    })
}

fn appends_read_back_in_order(store: &dyn Store) -> StoreFuture<'_, Result<(), String>> {
    Box::pin(async move {
        store.create("a", &row(b"i"), b"r0").await?;
        for seq in 1..300u64 {
            store.append("a", seq, format!("r{seq}").as_bytes())?;
        }
        store.flush()?;
        let journal = store.journal("a").await?;
        let last = store.last_seq("a").await?;
        let in_order = journal
            .iter()
            .enumerate()
            .all(|(i, (seq, bytes))| *seq == i as u64 && *bytes == format!("r{i}").into_bytes());
        Ok(expect(journal.len() == 300 && in_order, || {
            format!("{} records, in order: {in_order}", journal.len())
        })
        .and(expect(last == Some(299), || {
            format!("last_seq {last:?}, expected 299")
        }))
        .and(expect(store.last_seq("nobody").await?.is_none(), || {
            "last_seq of an unknown id is not None".into()
        })))
    })
}

fn prefixes_stay_apart(store: &dyn Store) -> StoreFuture<'_, Result<(), String>> {
    Box::pin(async move {
        for id in ["a", "a-1", "a_", "ab", "b"] {
            store.create(id, &row(id.as_bytes()), id.as_bytes()).await?;
            store.append(id, 1, id.as_bytes())?;
        }
        for id in ["a", "a-1", "a_", "ab", "b"] {
            let journal = store.journal(id).await?;
            if journal.len() != 2 || journal.iter().any(|(_, r)| r != id.as_bytes()) {
                return Ok(Err(format!("journal of {id:?} is {journal:?}")));
            }
        }
        Ok(Ok(()))
    })
}

fn index_holds_summaries(store: &dyn Store) -> StoreFuture<'_, Result<(), String>> {
    Box::pin(async move {
        store.create("b", &row(b"b0"), b"r").await?;
        store.create("a", &row(b"a0"), b"r").await?;
        store.put_index("a", &row(b"a1"))?;
        let entries = store.index_entries().await?;
        Ok(expect(
            entries
                == [
                    ("a".to_owned(), b"a1".to_vec()),
                    ("b".to_owned(), b"b0".to_vec()),
                ],
            || format!("index entries {entries:?}"),
        ))
    })
}

fn remove_takes_everything(store: &dyn Store) -> StoreFuture<'_, Result<(), String>> {
    Box::pin(async move {
        store.create("a", &row(b"i"), b"r0").await?;
        store.append("a", 1, b"r1")?;
        store.create("ab", &row(b"i"), b"r0").await?;
        store.remove("a")?;
        store.flush()?;
        Ok(expect(store.journal("a").await?.is_empty(), || {
            "journal kept".into()
        })
        .and(expect(store.index("a").await?.is_none(), || {
            "index kept".into()
        }))
        .and(expect(store.journal("ab").await?.len() == 1, || {
            "removing \"a\" touched \"ab\"".into()
        }))
        .and(expect(
            store.create("a", &row(b"i"), b"again").await?,
            || "a removed id cannot be created again".into(),
        )))
    })
}

fn create_cut_short_is_taken_over(store: &dyn Store) -> StoreFuture<'_, Result<(), String>> {
    Box::pin(async move {
        // An index entry without a journal, as a crash between the two leaves.
        store.put_index("a", &row(b"stale"))?;
        let created = store.create("a", &row(b"fresh"), b"r0").await?;
        let index = store.index("a").await?;
        Ok(
            expect(created, || "create refused an id with no journal".into()).and(expect(
                index.as_deref() == Some(b"fresh".as_slice()),
                || format!("index {index:?}"),
            )),
        )
    })
}

/// An instance that continued as new: run 1 begins at `1 << 32`. A range
/// reads one run; the runs before one go, the rest and the index stay.
fn runs_read_and_go_apart(store: &dyn Store) -> StoreFuture<'_, Result<(), String>> {
    Box::pin(async move {
        const RUN_1: u64 = 1 << 32;
        store.create("a", &row(b"i"), b"r0").await?;
        store.append("a", 1, b"r1")?;
        store.append("a", RUN_1, b"run1-0")?;
        store.append("a", RUN_1 + 1, b"run1-1")?;
        store.create("ab", &row(b"i"), b"ab").await?;
        store.append("ab", RUN_1, b"ab-run1")?;
        store.flush()?;
        let run0 = store.journal_range("a", 0..RUN_1).await?;
        let run1 = store.journal_range("a", RUN_1..2 * RUN_1).await?;
        let last = store.last_seq("a").await?;
        let checked = expect(run0 == [(0, b"r0".to_vec()), (1, b"r1".to_vec())], || {
            format!("run 0 reads {run0:?}")
        })
        .and(expect(
            run1 == [(RUN_1, b"run1-0".to_vec()), (RUN_1 + 1, b"run1-1".to_vec())],
            || format!("run 1 reads {run1:?}"),
        ))
        .and(expect(last == Some(RUN_1 + 1), || {
            format!("last_seq {last:?}, expected {}", RUN_1 + 1)
        }));
        store.remove_before("a", RUN_1)?;
        store.flush()?;
        let left = store.journal("a").await?;
        let other = store.journal("ab").await?;
        Ok(checked
            .and(expect(left.len() == 2 && left[0].0 == RUN_1, || {
                format!("after removing run 0: {left:?}")
            }))
            .and(expect(store.index("a").await?.is_some(), || {
                "removing the old runs took the index entry".into()
            }))
            .and(expect(other.len() == 2, || {
                format!("removing the old runs of \"a\" touched \"ab\": {other:?}")
            }))
            .and(expect(
                store.journal_range("a", 0..0).await?.is_empty(),
                || "an empty range reads records".into(),
            )))
    })
}

fn queue_limits_swap_whole(store: &dyn Store) -> StoreFuture<'_, Result<(), String>> {
    Box::pin(async move {
        let first = store.swap_queue_limits("q", None, b"a").await?;
        let again = store.swap_queue_limits("q", None, b"b").await?;
        let changed = store.swap_queue_limits("q", Some(b"a"), b"c").await?;
        let stale = store.swap_queue_limits("q", Some(b"a"), b"d").await?;
        store.swap_queue_limits("other", None, b"o").await?;
        store.flush()?;
        let one = store.queue_limits("q").await?;
        let none = store.queue_limits("none").await?;
        let all = store.all_queue_limits().await?;
        Ok(expect(first && !again && changed && !stale, || {
            format!("swaps answered {first}, {again}, {changed}, {stale}; expected true, false, true, false")
        })
        .and(expect(one.as_deref() == Some(b"c".as_slice()), || {
            format!("the limits read back {one:?}")
        }))
        .and(expect(none.is_none(), || format!("a queue never stored reads {none:?}")))
        .and(expect(
            all == [("other".to_owned(), b"o".to_vec()), ("q".to_owned(), b"c".to_vec())],
            || format!("every queue's limits read {all:?}"),
        )))
    })
}

/// On a store that keeps a timer index ([`Store::timers_kept`]): each
/// active entry's wake is filed, replaced by the next write of the entry,
/// and gone with a write that files none or with the instance; start-up
/// reads the entries of those due and only the timers of the others.
fn timers_file_wakes(store: &dyn Store) -> StoreFuture<'_, Result<(), String>> {
    Box::pin(async move {
        if !store.timers_kept() {
            return Ok(Ok(()));
        }
        for id in ["a", "b", "c"] {
            store.create(id, &row(id.as_bytes()), b"r0").await?;
        }
        let waking = |summary: &'static [u8], wake| IndexRow {
            wake: Some(wake),
            ..row(summary)
        };
        store.put_index("a", &waking(b"a1", (500, false)))?;
        store.put_index("b", &waking(b"b1", (100, true)))?;
        store.flush()?;
        let filed = store.timers_after(None, 10).await?;
        let after_b = store.timers_after(Some((100, "b")), 10).await?;
        let set = store.active_entries_by(200).await?;
        let may_run: Vec<&str> = set.may_run.iter().map(|(id, _)| id.as_str()).collect();
        let checks = expect(
            filed == [(100, "b".into(), true), (500, "a".into(), false)],
            || format!("timers filed: {filed:?}"),
        )
        .and(expect(after_b == [(500, "a".into(), false)], || {
            format!("timers after b's: {after_b:?}")
        }))
        .and(expect(
            store.timer_of("a").await? == Some((500, false))
                && store.timer_of("c").await?.is_none(),
            || "timer_of answers another timer".into(),
        ))
        .and(expect(
            set.asleep == [("a".into(), 500, false)] && may_run == ["b", "c"],
            || {
                format!(
                    "active by 200: {may_run:?} may run, {:?} asleep",
                    set.asleep
                )
            },
        ));
        if checks.is_err() {
            return Ok(checks);
        }
        store.put_index("a", &row(b"a2"))?;
        store.remove("b")?;
        store.flush()?;
        let filed = store.timers_after(None, 10).await?;
        Ok(expect(filed.is_empty(), || {
            format!("timers left after a write without and a removal: {filed:?}")
        }))
    })
}
