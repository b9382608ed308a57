//! A page of `list()` on PostgreSQL: one keyset query, built with only
//! the conditions the filter has, so the planner picks an index for each
//! (a generic `$1 IS NULL OR ..` would keep it from any). And the columns
//! an index entry's facts fill (migration 6).

use std::time::SystemTime;

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::store::{IndexEntry, IndexQuery, PageOrder, PagePosition};

/// The fact columns a create fills (`started_at` is the database's `now()`).
pub(super) const FACT_COLUMNS: &str =
    "facts, ended_at, parent, tags, rollback_failed, failed_compensation";

/// The values of [`FACT_COLUMNS`], from parameter `$n` on.
pub(super) fn fact_values(n: usize) -> String {
    format!(
        "${n}, ${}, ${}, (${}::text)::jsonb, ${}, ${}",
        n + 1,
        n + 2,
        n + 3,
        n + 4,
        n + 5
    )
}

/// `column = value` of [`FACT_COLUMNS`], from parameter `$n` on.
pub(super) fn fact_sets(n: usize) -> String {
    format!(
        "facts = ${n}, ended_at = ${}, parent = ${}, tags = (${}::text)::jsonb, rollback_failed = ${}, failed_compensation = ${}",
        n + 1,
        n + 2,
        n + 3,
        n + 4,
        n + 5
    )
}

/// `column = value` of the queue columns (migration 7), from parameter
/// `$n` on: queue, key, priority, whether it took a slot.
pub(super) fn queue_sets(n: usize) -> String {
    format!(
        "queue = ${n}, queue_key = ${}, priority = ${}, queue_taken = ${}",
        n + 1,
        n + 2,
        n + 3
    )
}

/// Tags as a JSON object (for `@>` on the GIN index).
pub(super) fn tags_json(tags: &[(String, String)]) -> String {
    let object: serde_json::Map<String, serde_json::Value> = tags
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::Value::Object(object).to_string()
}

/// A parameter of a page's query.
enum Param {
    Text(String),
    Time(SystemTime),
    Int(i64),
}

/// A page's query, owned, to run on a read connection.
pub(crate) struct PageSql {
    pub(super) sql: String,
    params: Vec<Param>,
    pub(super) limit: i64,
}

impl PageSql {
    pub(super) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| match p {
                Param::Text(t) => t as &(dyn ToSql + Sync),
                Param::Time(t) => t as &(dyn ToSql + Sync),
                Param::Int(i) => i as &(dyn ToSql + Sync),
            })
            .collect()
    }

    /// The query of `query`'s page, on the tables of `schema`.
    pub(super) fn of(schema: &str, query: &IndexQuery<'_>) -> PageSql {
        let mut page = PageSql {
            sql: String::new(),
            params: Vec::new(),
            limit: i64::try_from(query.limit).unwrap_or(i64::MAX),
        };
        let mut conditions = Vec::new();
        let bind = |page: &mut PageSql, param: Param| {
            page.params.push(param);
            format!("${}", page.params.len())
        };
        let text = |s: &str| Param::Text(s.to_owned());
        // A row from before migration 3 has no status or workflow: it is
        // answered too, and the engine judges it from its summary.
        if let Some(status) = query.status {
            let status = bind(&mut page, text(status));
            conditions.push(format!("(status = {status} OR status IS NULL)"));
        }
        if let Some(workflow) = query.workflow {
            let workflow = bind(&mut page, text(workflow));
            conditions.push(format!("(workflow = {workflow} OR workflow IS NULL)"));
        }
        if !query.tags.is_empty() {
            let tags = Param::Text(tags_json(query.tags));
            conditions.push(format!("tags @> ({}::text)::jsonb", bind(&mut page, tags)));
        }
        if let Some(parent) = query.parent {
            conditions.push(format!("parent = {}", bind(&mut page, text(parent))));
        }
        if let Some(prefix) = query.id_prefix {
            // Ids are of [A-Za-z0-9_-], all before '~': the range of the
            // ids with this prefix, on the `C` index.
            let p = bind(&mut page, text(prefix));
            conditions.push(format!(
                "id COLLATE \"C\" >= {p} AND id COLLATE \"C\" < ({p}::text || '~')"
            ));
        }
        let mut time = |page: &mut PageSql, column: &str, op: &str, at: Option<SystemTime>| {
            if let Some(at) = at {
                let at = bind(page, Param::Time(at));
                conditions.push(format!("{column} {op} {at}"));
            }
        };
        time(&mut page, "started_at", ">=", query.started_from);
        time(&mut page, "started_at", "<", query.started_until);
        time(&mut page, "ended_at", ">=", query.ended_from);
        time(&mut page, "ended_at", "<", query.ended_until);
        if query.rollback_failed {
            conditions.push("rollback_failed".to_owned());
        }
        if query.failed_compensation {
            conditions.push("failed_compensation".to_owned());
        }
        if let Some(queue) = query.queue {
            conditions.push(format!("queue = {}", bind(&mut page, text(queue))));
        }
        let order = match query.order {
            PageOrder::Started => {
                conditions.push("started_at IS NOT NULL".to_owned());
                if let Some(after) = query.after {
                    let micros = bind(&mut page, Param::Int(after.started_micros));
                    let id = bind(&mut page, text(&after.id));
                    conditions.push(format!(
                        "(started_at, id COLLATE \"C\") > \
                         (to_timestamp(0) + ({micros}::bigint || ' microseconds')::interval, {id})"
                    ));
                }
                "started_at, id COLLATE \"C\""
            }
            PageOrder::Id => {
                if let Some(after) = query.after {
                    let id = bind(&mut page, text(&after.id));
                    conditions.push(format!("id COLLATE \"C\" > {id}"));
                }
                "id COLLATE \"C\""
            }
        };
        let limit = Param::Int(page.limit);
        let limit = bind(&mut page, limit);
        let conditions = if conditions.is_empty() {
            "true".to_owned()
        } else {
            conditions.join(" AND ")
        };
        page.sql = format!(
            "SELECT id, summary, facts,
                    coalesce((extract(epoch FROM started_at) * 1000000)::bigint, 0),
                    owner, coalesce(owned_since, now())
             FROM {schema}.instances WHERE {conditions} ORDER BY {order} LIMIT {limit}"
        );
        page
    }
}

/// An entry of a page's row.
pub(super) fn entry(row: &Row) -> IndexEntry {
    let id: String = row.get(0);
    let owner: Option<String> = row.get(4);
    IndexEntry {
        summary: row.get(1),
        facts: row.get(2),
        position: PagePosition {
            started_micros: row.get(3),
            id: id.clone(),
        },
        owner: owner.map(|owner| (owner, row.get(5))),
        id,
    }
}
