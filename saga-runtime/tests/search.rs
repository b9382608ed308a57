//! Tags, search and paging: tags given at start and by `ctx.tag` (which
//! takes no slot, so a workflow that starts tagging still replays), their
//! limits, every `ListFilter` condition, and walks of pages that see each
//! instance once while others start. Runs on sled here and on PostgreSQL
//! in `postgres_semantics`.

#[path = "support/helpers.rs"]
mod helpers;

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use saga_runtime::inspect::{Cursor, EventKind, InstanceInfo, MAX_TAGS};
use saga_runtime::prelude::*;
use saga_runtime::{Error, StartOptions};

use helpers::{Reopenable, fresh, kinds, until_status, within};

#[workflow(name = "search-echo")]
async fn echo(_ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    Ok(n)
}

#[workflow(name = "search-tagging")]
async fn tagging(ctx: WorkflowContext, customer: String) -> Result<(), WorkflowError> {
    ctx.tag("customer", &customer)?;
    let _: u64 = ctx.wait_for_event("wait-go", "go", "7 days").await?;
    ctx.tag("stage", "done")?;
    Ok(())
}

fn ids(found: &[InstanceInfo]) -> Vec<&str> {
    found.iter().map(|i| i.id.as_str()).collect()
}

async fn listed(engine: &Engine, filter: &ListFilter) -> Vec<String> {
    let found = engine.list(filter).await.expect("list");
    ids(&found).into_iter().map(str::to_owned).collect()
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

// Rule: tags given at start and by the workflow are in its index entry:
// `list` finds it by them (every tag given must match), `info` shows them.
#[tokio::test]
async fn tags_from_the_start_and_from_the_workflow_find_the_instance() {
    let engine = fresh(Engine::builder()).await;
    let options = StartOptions::new().tag("region", "eu");
    let run = engine
        .start_with(tagging, "t-42", "42".to_owned(), options)
        .await
        .unwrap();
    let other = engine
        .start_with(
            tagging,
            "t-7",
            "7".to_owned(),
            StartOptions::new().tag("region", "eu"),
        )
        .await
        .unwrap();
    until_status(&run, Status::Waiting).await;
    until_status(&other, Status::Waiting).await;

    let customer_42 = ListFilter::all().tag("customer", "42");
    assert_eq!(listed(&engine, &customer_42).await, ["t-42"]);
    let eu = ListFilter::all().tag("region", "eu");
    assert_eq!(listed(&engine, &eu).await, ["t-42", "t-7"]);
    let both = ListFilter::all().tag("region", "eu").tag("customer", "7");
    assert_eq!(listed(&engine, &both).await, ["t-7"]);
    let none = ListFilter::all().tag("region", "us").tag("customer", "7");
    assert!(listed(&engine, &none).await.is_empty());
    assert_eq!(
        run.info().await.unwrap().tags,
        tags(&[("customer", "42"), ("region", "eu")])
    );

    engine.send_event("t-42", "go", &1u64).await.unwrap();
    within("the end", run.result()).await.unwrap();
    let done = ListFilter::all().tag("stage", "done");
    assert_eq!(listed(&engine, &done).await, ["t-42"]);
    assert_eq!(
        run.info().await.unwrap().tags,
        tags(&[("customer", "42"), ("region", "eu"), ("stage", "done")])
    );
    // A tag is no event of the history.
    assert!(
        !kinds(&run)
            .await
            .iter()
            .any(|k| format!("{k:?}").contains("stage")),
        "{:?}",
        kinds(&run).await
    );
}

// Rule: tag keys follow the step-name grammar, values are bounded, and an
// instance holds at most MAX_TAGS: typed errors, and nothing is stored.
#[tokio::test]
async fn tags_over_the_limits_are_typed_errors_and_store_nothing() {
    let engine = fresh(Engine::builder()).await;
    let bad_key = StartOptions::new().tag("Customer", "42");
    let refused = engine.start_with(echo, "bad-key", 1, bad_key).await;
    assert!(
        matches!(refused, Err(Error::InvalidTag { ref key, .. }) if key == "Customer"),
        "{refused:?}"
    );
    let long = StartOptions::new().tag("note", "x".repeat(257));
    let refused = engine.start_with(echo, "long-value", 1, long).await;
    assert!(
        matches!(refused, Err(Error::InvalidTag { .. })),
        "{refused:?}"
    );
    let mut many = StartOptions::new();
    for i in 0..=MAX_TAGS {
        many = many.tag(format!("k{i}"), "v");
    }
    let refused = engine.start_with(echo, "many", 1, many).await;
    assert!(
        matches!(refused, Err(Error::TooManyTags { limit, .. }) if limit == MAX_TAGS),
        "{refused:?}"
    );
    assert!(engine.list(&ListFilter::all()).await.unwrap().is_empty());

    // Exactly the limit is fine.
    let mut most = StartOptions::new();
    for i in 0..MAX_TAGS {
        most = most.tag(format!("k{i}"), "v");
    }
    let run = engine.start_with(echo, "most", 1, most).await.unwrap();
    within("the end", run.result()).await.unwrap();
    assert_eq!(run.info().await.unwrap().tags.len(), MAX_TAGS);
}

#[workflow(name = "search-tag-flood")]
async fn tag_flood(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    for i in 0..=MAX_TAGS {
        ctx.tag(&format!("k{i}"), "v")?;
    }
    Ok(())
}

// Rule: a workflow that tags past the limit fails with the typed error.
#[tokio::test]
async fn a_workflow_tagging_past_the_limit_fails_with_the_typed_error() {
    let engine = fresh(Engine::builder()).await;
    let run = engine.start(tag_flood, "flood", ()).await.unwrap();
    match within("the failure", run.result()).await {
        Err(Error::WorkflowFailed { failure, .. }) => {
            assert!(failure.message().contains("tags"), "{failure}");
        }
        other => panic!("expected the tag limit, got {other:?}"),
    }
    assert_eq!(run.info().await.unwrap().tags.len(), MAX_TAGS);
}

static RESERVED: Mutex<Vec<String>> = Mutex::new(Vec::new());

#[step(name = "reserve")]
async fn reserve(key: IdempotencyKey) -> Result<u64, StepError> {
    RESERVED.lock().unwrap().push(key.to_string());
    Ok(3)
}

mod release_1 {
    use super::*;

    #[workflow(name = "search-deploy")]
    pub(super) async fn ship(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
        let n = reserve(&ctx).await?;
        let m: u64 = ctx.wait_for_event("wait-go", "go", "7 days").await?;
        Ok(n + m)
    }
}

mod release_2 {
    use super::*;

    /// Release 1 with tags before and after its durable calls.
    #[workflow(name = "search-deploy")]
    pub(super) async fn ship(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
        ctx.tag("region", "eu")?;
        let n = reserve(&ctx).await?;
        ctx.tag("reserved", &n.to_string())?;
        let m: u64 = ctx.wait_for_event("wait-go", "go", "7 days").await?;
        ctx.tag("stage", "shipped")?;
        Ok(n + m)
    }
}

// Rule: `ctx.tag` takes no slot: a workflow that tags where its running
// instances did not replays their history, runs no step again, and
// records the tags.
#[tokio::test]
async fn tags_added_to_a_running_workflow_do_not_break_its_replay() {
    let store = Reopenable::new("search_deploy").await;
    let engine = store.open(Engine::builder).await;
    let run = engine.start(release_1::ship, "ship-1", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    let engine = store
        .open(|| Engine::builder().register(release_2::ship))
        .await;
    // The waiting instance meets the new code when its event wakes it:
    // the replay adds the new tags and runs no step again.
    let run = engine.instance("ship-1").await.unwrap();
    engine.send_event("ship-1", "go", &4u64).await.unwrap();
    assert_eq!(within("the end", run.result::<u64>()).await.unwrap(), 7);
    assert_eq!(
        run.info().await.unwrap().tags,
        tags(&[("region", "eu"), ("reserved", "3"), ("stage", "shipped")])
    );
    let reserved = RESERVED.lock().unwrap().clone();
    assert_eq!(
        reserved.iter().filter(|k| k.starts_with("ship-1")).count(),
        1,
        "the step ran once: {reserved:?}"
    );
    let steps = kinds(&run)
        .await
        .into_iter()
        .filter(|k| matches!(k, EventKind::StepStarted { .. }))
        .count();
    assert_eq!(steps, 1);
    drop(run);
    engine.close().await;
}

static REFUND_FAILED_ONCE: Mutex<Vec<String>> = Mutex::new(Vec::new());

#[step(name = "charge", rollback = refund)]
async fn charge(key: IdempotencyKey, refund_fails: u32) -> Result<u32, StepError> {
    let _ = key;
    Ok(refund_fails)
}

/// Fails as often as the step's output says (a fatal failure each time).
#[rollback(retries = 0)]
async fn refund(ctx: RollbackContext<'_, u32>) -> Result<(), StepError> {
    let fails = ctx.output().copied().unwrap_or(0) as usize;
    let key = ctx.key().to_string();
    let mut failed = REFUND_FAILED_ONCE.lock().unwrap();
    if failed.iter().filter(|k| **k == key).count() < fails {
        failed.push(key);
        return Err(StepError::fatal("the refund API is down"));
    }
    Ok(())
}

#[workflow(name = "search-refunds")]
async fn out_of_stock(ctx: WorkflowContext, refund_fails: u32) -> Result<(), WorkflowError> {
    charge(&ctx, refund_fails).await?;
    Err(WorkflowError::new("out of stock"))
}

// Rule: every filter condition holds: workflow, status, parent, id
// prefix, started and ended ranges, "rollback failed" (it gave up, and
// was not retried to the end), "has a failed compensation" (once, even if
// a retried rollback completed it).
#[tokio::test]
async fn every_filter_condition_holds() {
    let engine = fresh(Engine::builder()).await;
    let first = engine.start(echo, "order-1", 1).await.unwrap();
    within("order-1", first.result()).await.unwrap();
    let child = StartOptions::new().parent("order-1");
    let second = engine.start_with(echo, "order-2", 2, child).await.unwrap();
    within("order-2", second.result()).await.unwrap();
    // A real pause: start times are the store's clock on PostgreSQL, and
    // the ranges below must fall between two starts.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let between = SystemTime::now();
    tokio::time::sleep(Duration::from_millis(30)).await;

    let gave_up = engine.start(out_of_stock, "refund-down", 1).await.unwrap();
    assert!(within("refund-down", gave_up.result()).await.is_err());
    let retried = engine
        .start(out_of_stock, "refund-retried", 1)
        .await
        .unwrap();
    assert!(within("refund-retried", retried.result()).await.is_err());
    within("the retry", retried.retry_rollback()).await.unwrap();
    let clean = engine.start(out_of_stock, "refund-ok", 0).await.unwrap();
    assert!(within("refund-ok", clean.result()).await.is_err());
    let waiting = engine
        .start(tagging, "waiting-1", "9".to_owned())
        .await
        .unwrap();
    until_status(&waiting, Status::Waiting).await;

    let all = ListFilter::all();
    assert_eq!(
        listed(&engine, &all.clone().workflow("search-echo")).await,
        ["order-1", "order-2"]
    );
    assert_eq!(
        listed(&engine, &all.clone().status(Status::Waiting)).await,
        ["waiting-1"]
    );
    assert_eq!(
        listed(&engine, &all.clone().parent("order-1")).await,
        ["order-2"]
    );
    assert_eq!(
        second.info().await.unwrap().parent.as_deref(),
        Some("order-1")
    );
    assert_eq!(
        listed(&engine, &all.clone().id_prefix("refund-")).await,
        ["refund-down", "refund-ok", "refund-retried"]
    );
    assert_eq!(
        listed(&engine, &all.clone().id_prefix("order-2")).await,
        ["order-2"]
    );
    assert_eq!(
        listed(&engine, &all.clone().started_before(between)).await,
        ["order-1", "order-2"]
    );
    assert_eq!(
        listed(
            &engine,
            &all.clone().started_after(between).workflow("search-echo")
        )
        .await,
        Vec::<String>::new()
    );
    assert_eq!(
        listed(&engine, &all.clone().started_after(between)).await,
        ["refund-down", "refund-ok", "refund-retried", "waiting-1"]
    );
    assert_eq!(
        listed(&engine, &all.clone().ended_before(between)).await,
        ["order-1", "order-2"]
    );
    assert_eq!(
        listed(&engine, &all.clone().ended_after(between)).await,
        ["refund-down", "refund-ok", "refund-retried"],
        "an instance that has not ended is in no range of ends"
    );
    assert_eq!(
        listed(&engine, &all.clone().rollback_failed()).await,
        ["refund-down"]
    );
    assert_eq!(
        listed(&engine, &all.clone().failed_compensation()).await,
        ["refund-down", "refund-retried"]
    );
    let info = retried.info().await.unwrap();
    assert!(
        info.failed_compensation && info.rollback_failure.is_none(),
        "{info:?}"
    );
    assert_eq!(
        listed(
            &engine,
            &all.clone()
                .failed_compensation()
                .started_after(between)
                .id_prefix("refund-r")
        )
        .await,
        ["refund-retried"]
    );
}

// Rule: `list` and `info` say who drives an unfinished instance, and since
// when; a finished one has no owner.
#[tokio::test]
async fn an_unfinished_instance_names_its_owner() {
    let before = SystemTime::now() - Duration::from_secs(3600);
    let engine = fresh(Engine::builder()).await;
    let waiting = engine
        .start(tagging, "owned-1", "1".to_owned())
        .await
        .unwrap();
    until_status(&waiting, Status::Waiting).await;
    let done = engine.start(echo, "owned-2", 2).await.unwrap();
    within("owned-2", done.result()).await.unwrap();

    let owner = waiting.info().await.unwrap().owner.expect("an owner");
    assert!(!owner.worker.is_empty());
    assert!(owner.since >= before && owner.since <= SystemTime::now() + Duration::from_secs(60));
    assert_eq!(done.info().await.unwrap().owner, None);
    let found = engine.list(&ListFilter::all()).await.unwrap();
    assert_eq!(found[0].owner.as_ref(), Some(&owner));
    assert_eq!(found[1].owner, None);
}

// Rule: a cursor prints and parses back; a cursor of another order, or
// text that is no cursor, is a typed error.
#[tokio::test]
async fn cursors_print_and_parse_back() {
    let engine = fresh(Engine::builder()).await;
    for i in 0..3 {
        engine.start(echo, &format!("c-{i}"), i).await.unwrap();
    }
    let page = engine
        .list_page(&ListFilter::all(), &Page::first(2))
        .await
        .unwrap();
    assert_eq!(ids(&page.instances), ["c-0", "c-1"]);
    let cursor = page.next.expect("more follow");
    let parsed: Cursor = cursor.to_string().parse().unwrap();
    assert_eq!(parsed, cursor);
    let rest = engine
        .list_page(&ListFilter::all(), &Page::first(2).after(parsed.clone()))
        .await
        .unwrap();
    assert_eq!(ids(&rest.instances), ["c-2"]);
    assert!(rest.next.is_none());
    let by_id = engine
        .list_page(&ListFilter::all(), &Page::first(2).by_id().after(parsed))
        .await;
    assert!(matches!(by_id, Err(Error::InvalidArgument(_))), "{by_id:?}");
    assert!("nonsense".parse::<Cursor>().is_err());
}

/// How many instances the paging walk goes through.
const MANY: usize = 10_000;

/// Starts `ids` on `engine`, many at once (group commit keeps it cheap).
async fn start_all(engine: &Engine, ids: Vec<String>, tag: &'static str) {
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in ids.chunks(500) {
        let (engine, chunk) = (engine.clone(), chunk.to_vec());
        tasks.spawn(async move {
            for id in chunk {
                let options = StartOptions::new().tag("batch", tag);
                engine.start_with(echo, &id, 1, options).await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// Walks every page of `filter` in `page`'s order; the ids in order.
async fn walk(engine: &Engine, filter: &ListFilter, mut page: Page) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let found = engine.list_page(filter, &page).await.unwrap();
        assert!(found.unreadable.is_empty());
        seen.extend(found.instances.into_iter().map(|i| i.id));
        match found.next {
            Some(cursor) => page = page.after(cursor),
            None => return seen,
        }
    }
}

// Rule: walking the pages sees every instance that matches the filter for
// the whole walk exactly once, in start (or id) order, while new
// instances start; it never reads the whole index at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_of_ten_thousand_instances_has_no_gaps_and_no_repeats() {
    let engine = fresh(Engine::builder()).await;
    let old: Vec<String> = (0..MANY).map(|i| format!("old-{i:05}")).collect();
    start_all(&engine, old.clone(), "a").await;

    let newcomers = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let new = (0..1000).map(|i| format!("new-{i:04}")).collect();
            start_all(&engine, new, "a").await;
        })
    };
    let tagged = ListFilter::all().tag("batch", "a");
    let by_start = walk(&engine, &tagged, Page::first(700)).await;
    let by_id = walk(&engine, &ListFilter::all(), Page::first(900).by_id()).await;
    newcomers.await.unwrap();

    for (order, seen) in [("start", &by_start), ("id", &by_id)] {
        let unique: HashSet<&String> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len(), "{order} order: no repeats");
        let missing: Vec<&String> = old.iter().filter(|id| !unique.contains(id)).collect();
        assert!(
            missing.is_empty(),
            "{order} order: gaps {:?}",
            &missing[..missing.len().min(5)]
        );
    }
    let mut sorted = by_id.clone();
    sorted.sort();
    assert_eq!(by_id, sorted, "id order");
    // Everything the walk saw in start order is in start order.
    let all = walk(&engine, &tagged, Page::first(MANY)).await;
    assert_eq!(all.len(), MANY + 1000);
    let position: std::collections::HashMap<&String, usize> =
        all.iter().enumerate().map(|(i, id)| (id, i)).collect();
    assert!(
        by_start
            .windows(2)
            .all(|w| position[&w[0]] < position[&w[1]]),
        "start order"
    );
}
