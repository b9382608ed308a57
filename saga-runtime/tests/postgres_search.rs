//! Search on PostgreSQL beyond the shared semantics (`search.rs` runs on
//! both stores): every filter of `list` is a query on an index (its
//! `EXPLAIN`), rows written before migration 6 are backfilled from their
//! journals when a worker connects, and an index entry that does not read
//! is reported, not skipped.
#![cfg(feature = "postgres")]

#[path = "support/helpers.rs"]
mod helpers;

use std::time::{Duration, SystemTime};

use saga_runtime::prelude::*;
use saga_runtime::{Error, StartOptions};

use helpers::{postgres, within};

#[workflow(name = "pg-search-echo")]
async fn echo(_ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    Ok(n)
}

async fn worker(schema: &str) -> Engine {
    Engine::builder()
        .postgres_schema(schema)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e))
}

async fn reader(schema: &str) -> Engine {
    Engine::builder()
        .postgres_schema(schema)
        .connect_read_only(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e))
}

// Rule: on PostgreSQL each filter of `list_page` runs on an index, never a
// scan of every row: on 20,000 rows, analyzed, the plan of each uses one.
#[tokio::test]
async fn every_filter_is_a_query_on_an_index() {
    let schema = postgres::fresh_schema("search_explain").await;
    let engine = worker(&schema).await;
    let run = engine
        .start_with(echo, "real-1", 1, StartOptions::new().tag("customer", "1"))
        .await
        .unwrap();
    within("real-1", run.result()).await.unwrap();
    let admin = postgres::admin().await;
    admin
        .batch_execute(&format!(
            "INSERT INTO {schema}.instances
                 (id, summary, owner, workflow, status, active, facts, started_at, ended_at,
                  parent, tags, rollback_failed, failed_compensation)
             SELECT 'fake-' || g, summary, owner, workflow, status, false, facts,
                    now() - g * interval '1 second', now() - g * interval '1 second',
                    CASE WHEN g % 100 = 0 THEN 'real-1' END,
                    jsonb_build_object('customer', g::text),
                    g % 1000 = 0, g % 500 = 0
             FROM {schema}.instances, generate_series(1, 20000) g WHERE id = 'real-1';
             ANALYZE {schema}.instances;"
        ))
        .await
        .unwrap();
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let all = ListFilter::all();
    let filters = [
        ("no filter", all.clone()),
        ("tag", all.clone().tag("customer", "42")),
        ("parent", all.clone().parent("real-1")),
        ("id prefix", all.clone().id_prefix("fake-42")),
        (
            "started after",
            all.clone().started_after(SystemTime::now()),
        ),
        ("started before", all.clone().started_before(hour_ago)),
        ("ended after", all.clone().ended_after(SystemTime::now())),
        ("rollback failed", all.clone().rollback_failed()),
        ("failed compensation", all.clone().failed_compensation()),
        ("status", all.clone().status(Status::Errored)),
    ];
    let mut report = String::new();
    for (what, filter) in &filters {
        for page in [Page::first(100), Page::first(100).by_id()] {
            let plan = engine
                .explain_list_page(filter, &page)
                .await
                .unwrap()
                .expect("a plan on PostgreSQL");
            report.push_str(&format!("-- {what}, {:?} order\n{plan}\n", page.order()));
            assert!(
                plan.contains("Index") && !plan.contains("Seq Scan"),
                "{what} ({:?}): {plan}",
                page.order()
            );
        }
    }
    // A later page: the keyset condition on the same index.
    for page in [Page::first(100), Page::first(100).by_id()] {
        let first = engine.list_page(&all, &page).await.unwrap();
        let next = page.clone().after(first.next.expect("more pages"));
        let plan = engine
            .explain_list_page(&all, &next)
            .await
            .unwrap()
            .unwrap();
        report.push_str(&format!(
            "-- second page, {:?} order\n{plan}\n",
            page.order()
        ));
        assert!(
            plan.contains("Index Cond") && !plan.contains("Seq Scan"),
            "{plan}"
        );
    }
    println!("{report}");
    // And the pages answer what the plans promise.
    let found = engine
        .list_page(&all.clone().tag("customer", "1"), &Page::first(10))
        .await
        .unwrap();
    assert_eq!(
        found
            .instances
            .iter()
            .map(|i| i.id.as_str())
            .collect::<Vec<_>>(),
        ["fake-1", "real-1"]
    );
}

// Rule: rows from before migration 6 (their facts NULL) are backfilled from
// their journals, in bounded batches, by the next worker that connects; a
// reader does not write them, and in id order still sees them.
#[tokio::test]
async fn rows_from_before_the_facts_are_backfilled_when_a_worker_connects() {
    let schema = postgres::fresh_schema("search_backfill").await;
    let engine = worker(&schema).await;
    // More than one batch of the backfill.
    for i in 0..300 {
        let options = StartOptions::new().tag("customer", format!("{}", i % 3));
        engine
            .start_with(echo, &format!("old-{i:03}"), i, options)
            .await
            .unwrap();
    }
    let last = engine.instance("old-299").await.unwrap();
    within("the last", last.result::<u64>()).await.unwrap();
    engine.close().await;
    // What a release before migration 6 left: no facts, no start time.
    let admin = postgres::admin().await;
    admin
        .batch_execute(&format!(
            "UPDATE {schema}.instances SET facts = NULL, started_at = NULL, ended_at = NULL,
                 parent = NULL, tags = NULL, rollback_failed = NULL, failed_compensation = NULL"
        ))
        .await
        .unwrap();

    let read = reader(&schema).await;
    let customer_1 = ListFilter::all().tag("customer", "1");
    assert!(read.list(&customer_1).await.unwrap().is_empty());
    assert_eq!(read.list(&ListFilter::all()).await.unwrap().len(), 300);

    let engine = worker(&schema).await;
    let found = engine.list(&customer_1).await.unwrap();
    assert_eq!(found.len(), 100);
    assert_eq!(found[0].id, "old-001");
    let unfilled: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM {schema}.instances WHERE facts IS NULL OR started_at IS NULL"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(unfilled, 0);
    let page = engine
        .list_page(
            &ListFilter::all().ended_before(SystemTime::now()),
            &Page::first(1000),
        )
        .await
        .unwrap();
    assert_eq!(page.instances.len(), 300);
    engine.close().await;
}

// Rule: an index entry that does not read is reported by `list_page` (and
// names its instance in `list`'s error), the others still listed.
#[tokio::test]
async fn an_unreadable_index_entry_is_reported_not_skipped() {
    let schema = postgres::fresh_schema("search_unreadable").await;
    let engine = worker(&schema).await;
    for id in ["fine-1", "broken-1", "fine-2"] {
        let run = engine.start(echo, id, 1).await.unwrap();
        within(id, run.result()).await.unwrap();
    }
    engine.close().await;
    let admin = postgres::admin().await;
    admin
        .batch_execute(&format!(
            "UPDATE {schema}.instances SET summary = '\\x02ff'::bytea WHERE id = 'broken-1'"
        ))
        .await
        .unwrap();

    let read = reader(&schema).await;
    let page = read
        .list_page(&ListFilter::all(), &Page::first(10).by_id())
        .await
        .unwrap();
    assert_eq!(
        page.instances
            .iter()
            .map(|i| i.id.as_str())
            .collect::<Vec<_>>(),
        ["fine-1", "fine-2"]
    );
    assert_eq!(page.unreadable.len(), 1);
    assert_eq!(page.unreadable[0].id, "broken-1");
    assert!(matches!(page.unreadable[0].error, Error::Corrupt { .. }));
    match read.list(&ListFilter::all()).await {
        Err(Error::Corrupt { what, .. }) => assert!(what.contains("broken-1"), "{what}"),
        other => panic!("expected the damage named, got {other:?}"),
    }
    // Gathered whole, the damaged entry is apart and hides none of the
    // others.
    let all = read.list_all(&ListFilter::all()).await.unwrap();
    assert_eq!(all.instances.len(), page.instances.len());
    assert_eq!(all.unreadable.len(), 1);
    assert_eq!(all.unreadable[0].id, "broken-1");
    assert!(all.next.is_none());
}

#[workflow(name = "pg-search-tagging")]
async fn tagging(ctx: WorkflowContext, customer: String) -> Result<String, WorkflowError> {
    ctx.tag("customer", &customer)?;
    let approval: String = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    Ok(approval)
}

// Rule: a record of a kind the release before does not know (a tag added
// while running) keeps that release's workers from claiming its instance:
// the row's `needs` counts the kinds the instance holds, and a worker of
// the release before claims only rows that need at most its 27.
#[tokio::test]
async fn a_tag_added_while_running_keeps_older_workers_from_claiming_it() {
    let schema = postgres::fresh_schema("search_needs").await;
    let engine = worker(&schema).await;
    let plain = engine.start(echo, "plain", 1).await.unwrap();
    within("plain", plain.result()).await.unwrap();
    let tagged = engine
        .start(tagging, "tagged", "42".to_owned())
        .await
        .unwrap();
    helpers::until_status(&tagged, Status::Waiting).await;
    let admin = postgres::admin().await;
    let needs = |id: &'static str| {
        let (admin, schema) = (&admin, &schema);
        async move {
            let row = admin
                .query_one(
                    &format!("SELECT needs FROM {schema}.instances WHERE id = $1"),
                    &[&id],
                )
                .await
                .unwrap();
            row.get::<_, i32>(0)
        }
    };
    let (plain_needs, tagged_needs) = (needs("plain").await, needs("tagged").await);
    assert!(plain_needs <= 27, "plain needs {plain_needs}");
    assert_eq!(tagged_needs, 28, "a Described record is kind 27");
    // This release still drives it.
    engine
        .send_event("tagged", "approval", "yes")
        .await
        .unwrap();
    assert_eq!(within("tagged", tagged.result()).await.unwrap(), "yes");
    engine.close().await;
}
