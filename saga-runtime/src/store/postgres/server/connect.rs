//! A connection to PostgreSQL and the statements it prepares, for the
//! server thread and the writers.

use std::time::Duration;

use tokio_postgres::{Client, Config, Statement};

use crate::store::postgres::fault::{PgFailure, bounded};
use crate::store::postgres::ssl_options::SslMode;

use crate::store::postgres::{lease, timers, tls};

use crate::codec::{NEEDS_SEALED, SEALED_FORMAT_VERSION};
use crate::store::postgres::page::{fact_sets, fact_values, queue_sets};

/// A connection with its prepared statements.
pub(in crate::store::postgres) struct Conn {
    pub(in crate::store::postgres) client: Client,
    pub(in crate::store::postgres) create: Statement,
    pub(in crate::store::postgres) append: Statement,
    pub(in crate::store::postgres) append_sealed: Statement,
    pub(in crate::store::postgres) append_indexed: Statement,
    pub(in crate::store::postgres) append_many: Statement,
    pub(in crate::store::postgres) append_many_sealed: Statement,
    pub(in crate::store::postgres) same_rows: Statement,
    pub(in crate::store::postgres) put_index: Statement,
    pub(in crate::store::postgres) remove: Statement,
    pub(in crate::store::postgres) remove_before: Statement,
    pub(in crate::store::postgres) journal: Statement,
    pub(in crate::store::postgres) last_seq: Statement,
    pub(in crate::store::postgres) index: Statement,
    pub(in crate::store::postgres) entries: Statement,
    pub(in crate::store::postgres) entries_where: Statement,
    pub(in crate::store::postgres) active_entries: Statement,
    pub(in crate::store::postgres) tail_start: Statement,
    pub(in crate::store::postgres) tail: Statement,
    pub(in crate::store::postgres) post: Statement,
    pub(in crate::store::postgres) posts: Statement,
    pub(in crate::store::postgres) answer_post: Statement,
    pub(in crate::store::postgres) answer: Statement,
    pub(in crate::store::postgres) forget_post: Statement,
    pub(in crate::store::postgres) owner_live: Statement,
    pub(in crate::store::postgres) claim: Statement,
    pub(in crate::store::postgres) disown: Statement,
    pub(in crate::store::postgres) unindexed: Statement,
    pub(in crate::store::postgres) backfill: Statement,
    pub(in crate::store::postgres) owner_of: Statement,
}

/// What every connection is made from.
pub(in crate::store::postgres) struct Target {
    pub(in crate::store::postgres) config: Config,
    /// TLS as the URL's `sslmode` asks (see `tls`).
    pub(in crate::store::postgres) tls: tokio_postgres_rustls::MakeRustlsConnect,
    pub(in crate::store::postgres) ssl_mode: SslMode,
    /// The URL without its password, for messages.
    pub(in crate::store::postgres) shown: String,
    /// The host(s) the URL names, for TLS errors.
    pub(in crate::store::postgres) host: String,
    pub(in crate::store::postgres) schema: String,
    /// How long one connection attempt, startup included, may take: the
    /// URL's `connect_timeout`, else the store timeout.
    pub(in crate::store::postgres) attempt_limit: Duration,
}

impl Target {
    /// A connection, TLS as the URL says, its attempt bounded (see
    /// `fault::bounded`). A refusal of TLS's is for good (see `tls`).
    pub(in crate::store::postgres) async fn open(
        &self,
    ) -> std::result::Result<
        (
            Client,
            tokio_postgres::Connection<tokio_postgres::Socket, tls::Stream>,
        ),
        PgFailure,
    > {
        let attempt = self.config.connect(self.tls.clone());
        bounded(self.attempt_limit, attempt, |e| {
            match tls::refusal(&e, self.ssl_mode, &self.host) {
                Some(refused) => PgFailure::Other(refused),
                None => PgFailure::from(e),
            }
        })
        .await
    }

    pub(in crate::store::postgres) async fn connect(&self) -> std::result::Result<Conn, PgFailure> {
        let (client, connection) = self.open().await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a PostgreSQL connection ended");
            }
        });
        let s = &self.schema;
        let channel = channel(s);
        let Writes {
            create,
            append,
            append_sealed,
            append_indexed,
            append_many,
            append_many_sealed,
            same_rows,
            put_index,
            remove,
            remove_before,
        } = prepare_writes(&client, s, &channel).await?;
        let Reads {
            journal,
            last_seq,
            index,
            entries,
            active_entries,
            entries_where,
            tail_start,
            tail,
        } = prepare_reads(&client, s).await?;
        let Others {
            post,
            posts,
            answer_post,
            answer,
            forget_post,
            owner_live,
            claim,
            disown,
            unindexed,
            backfill,
            owner_of,
        } = prepare_others(&client, s, &channel).await?;
        Ok(Conn {
            unindexed,
            backfill,
            owner_of,
            client,
            append_indexed,
            claim,
            disown,
            post,
            posts,
            answer_post,
            answer,
            forget_post,
            owner_live,
            create,
            append,
            append_sealed,
            append_many,
            append_many_sealed,
            same_rows,
            put_index,
            remove,
            remove_before,
            journal,
            last_seq,
            index,
            entries,
            entries_where,
            active_entries,
            tail_start,
            tail,
        })
    }

    /// A connection for writes: commits do not wait for the disk (a flush
    /// does).
    pub(in crate::store::postgres) async fn connect_writer(
        &self,
    ) -> std::result::Result<Conn, PgFailure> {
        let conn = self.connect().await?;
        conn.client
            .batch_execute("SET synchronous_commit TO off")
            .await?;
        Ok(conn)
    }
}

/// The database a config points at, without its password.
pub(in crate::store::postgres) fn describe(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(host_name)
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

/// The hosts a config names, as it names them, comma-separated.
pub(in crate::store::postgres) fn hosts(config: &Config) -> String {
    let hosts: Vec<String> = config.get_hosts().iter().map(host_name).collect();
    if hosts.is_empty() {
        "localhost".into()
    } else {
        hosts.join(",")
    }
}

pub(in crate::store::postgres) fn host_name(host: &tokio_postgres::config::Host) -> String {
    match host {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    }
}

/// The channel of `schema`'s notifications.
pub(in crate::store::postgres) fn channel(schema: &str) -> String {
    format!("saga:{schema}")
}

/// The statements that write an instance: create, append, index, remove.
struct Writes {
    create: Statement,
    append: Statement,
    append_sealed: Statement,
    append_indexed: Statement,
    append_many: Statement,
    append_many_sealed: Statement,
    same_rows: Statement,
    put_index: Statement,
    remove: Statement,
    remove_before: Statement,
}

/// The statements that read journals, index entries and the tail.
struct Reads {
    journal: Statement,
    last_seq: Statement,
    index: Statement,
    entries: Statement,
    active_entries: Statement,
    entries_where: Statement,
    tail_start: Statement,
    tail: Statement,
}

/// The statements of a store shared by workers: posts and their answers, claims, and the index backfill.
struct Others {
    post: Statement,
    posts: Statement,
    answer_post: Statement,
    answer: Statement,
    forget_post: Statement,
    owner_live: Statement,
    claim: Statement,
    disown: Statement,
    unindexed: Statement,
    backfill: Statement,
    owner_of: Statement,
}

/// Prepares the writes statements on `client`, for schema `s`.
async fn prepare_writes(
    client: &Client,
    s: &str,
    channel: &str,
) -> std::result::Result<Writes, PgFailure> {
    // The instance's row, share-locked, while it names this worker
    // (parameter `$n`): a claim waits for the write, or the write sees
    // the new owner and does nothing.
    // A record of the sealed format (`codec::NEEDS_SEALED`) marks its
    // instance's `needs`, so workers of the release before never claim it.
    let sealed_record = format!("get_byte($3, 0) = {SEALED_FORMAT_VERSION}");
    let sealed_needs = format!("CASE WHEN {sealed_record} THEN {NEEDS_SEALED} ELSE 0 END");
    let fence = |n: u8| {
        format!("fence AS (SELECT id FROM {s}.instances WHERE id = $1 AND owner = ${n} FOR SHARE)")
    };
    let create = client
        .prepare(&format!(
            "WITH i AS (INSERT INTO {s}.instances (id, summary, workflow, status, active, owner,
                                                   needs, {}, queue, queue_key, priority,
                                                   queue_taken, queue_order)
                        VALUES ($1, $2, $4, $5, $6,
                                $7::text,
                                $18::integer | {sealed_needs}, {},
                                $14, $15, $16, $17,
                                CASE WHEN $14::text IS NOT NULL THEN nextval('{s}.queue_order') END)
                        ON CONFLICT (id) DO NOTHING RETURNING id),
             j AS (INSERT INTO {s}.journal (id, seq, record)
                   SELECT id, 0, $3 FROM i ON CONFLICT DO NOTHING RETURNING 1)
             SELECT (SELECT count(*) FROM i), (SELECT count(*) FROM j)",
            crate::store::postgres::page::FACT_COLUMNS,
            fact_values(8)
        ))
        .await?;
    // A record of the sealed format also marks its instance's `needs`
    // (`append_sealed`, `append_many_sealed`); the others, nearly all,
    // touch no row of `instances`.
    let append_sql = |needs: &str| {
        format!(
            "WITH {},
             j AS (INSERT INTO {s}.journal (id, seq, record)
                   SELECT $1, $2, $3 FROM fence ON CONFLICT DO NOTHING RETURNING 1){needs}
             SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM j),
                    (SELECT record = $3 FROM {s}.journal WHERE id = $1 AND seq = $2)",
            fence(4)
        )
    };
    let append = client.prepare(&append_sql("")).await?;
    let append_sealed = client
        .prepare(&append_sql(&format!(
            ",
             n AS (UPDATE {s}.instances SET needs = needs | {NEEDS_SEALED}
                   WHERE id = $1 AND owner = $4 AND needs & {NEEDS_SEALED} = 0)"
        )))
        .await?;
    // A record that changes the index: both in one statement, the
    // row update being the fence, and the instance's timer with them
    // (`timers`). An instance that stops needing a driver (ended,
    // paused) is told on the schema's channel.
    let append_indexed = client
        .prepare(&format!(
            "WITH u AS (UPDATE {s}.instances SET summary = $5, workflow = $6, status = $7, active = $8,
                               needs = GREATEST(needs & ~{NEEDS_SEALED}, $15::integer)
                                       | (needs & {NEEDS_SEALED})
                                       | (CASE WHEN {sealed_record} THEN {NEEDS_SEALED} ELSE 0 END),
                               {}, {}
                        WHERE id = $1 AND owner = $4 RETURNING 1){},
             j AS (INSERT INTO {s}.journal (id, seq, record)
                   SELECT $1, $2, $3 FROM u ON CONFLICT DO NOTHING RETURNING 1)
             SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM j),
                    (SELECT record = $3 FROM {s}.journal WHERE id = $1 AND seq = $2),
                    (SELECT count(pg_notify('{channel}', 'stopped')) FROM u WHERE NOT $8)",
            fact_sets(9),
            queue_sets(16),
            timers::filing(s, "$1", "$5", "$8", "$20", "$21")
        ))
        .await?;
    // Many appends in one statement; the fence has a row per instance.
    let append_many_sql = |needs: &str| {
        format!(
            "WITH fence AS (SELECT id FROM {s}.instances WHERE id = ANY($1) AND owner = $4 FOR SHARE),
             j AS (INSERT INTO {s}.journal (id, seq, record)
                   SELECT r.id, r.seq, r.record
                   FROM unnest($1::text[], $2::bigint[], $3::bytea[]) AS r(id, seq, record)
                   WHERE r.id IN (SELECT id FROM fence)
                   ON CONFLICT DO NOTHING RETURNING 1){needs}
             SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM j)"
        )
    };
    let append_many = client.prepare(&append_many_sql("")).await?;
    // By the rows of the batch's ids (`id = ANY`, the primary key), not
    // by a scan of the worker's rows.
    let append_many_sealed = client
        .prepare(&append_many_sql(&format!(
            ",
             n AS (UPDATE {s}.instances SET needs = needs | {NEEDS_SEALED}
                   WHERE id = ANY(ARRAY(SELECT r.id FROM unnest($1::text[], $3::bytea[]) AS r(id, record)
                                        WHERE get_byte(r.record, 0) = {SEALED_FORMAT_VERSION}))
                     AND owner = $4 AND needs & {NEEDS_SEALED} = 0)"
        )))
        .await?;
    // After a batch that was not all new: how many of its rows are
    // there with the same bytes (a write applied again counts as
    // written). One index lookup per row.
    let same_rows = client
        .prepare(&format!(
            "SELECT count(*) FROM unnest($1::text[], $2::bigint[], $3::bytea[]) AS r(id, seq, record)
             WHERE EXISTS (SELECT 1 FROM {s}.journal x
                           WHERE x.id = r.id AND x.seq = r.seq AND x.record = r.record)"
        ))
        .await?;
    // Derived data: written only while owned, and otherwise dropped;
    // the timer with it.
    let put_index = client
        .prepare(&format!(
            "WITH u AS (UPDATE {s}.instances SET summary = $2, workflow = $3, status = $4, active = $5,
                               {}, {}
                        WHERE id = $1 AND owner = $6 RETURNING 1){}
             SELECT count(*) FROM u",
            fact_sets(7),
            queue_sets(13),
            timers::filing(s, "$1", "$2", "$5", "$17", "$18")
        ))
        .await?;
    // An instance of this worker's, or of no live worker's (a finished
    // one that retention removes): journal, index and posts at once.
    let remove = client
        .prepare(&format!(
            "WITH i AS (DELETE FROM {s}.instances i WHERE i.id = $1 AND (i.owner = $2 OR {})
                        RETURNING i.id),
             j AS (DELETE FROM {s}.journal WHERE id IN (SELECT id FROM i)),
             p AS (DELETE FROM {s}.inbox WHERE id IN (SELECT id FROM i)),
             t AS (DELETE FROM {s}.timers WHERE id IN (SELECT id FROM i))
             SELECT count(*) FROM i",
            lease::orphan(s)
        ))
        .await?;
    // An instance's old runs, while this worker owns it.
    let remove_before = client
        .prepare(&format!(
            "DELETE FROM {s}.journal WHERE id = $1 AND seq < $2
             AND EXISTS (SELECT 1 FROM {s}.instances WHERE id = $1 AND owner = $3)"
        ))
        .await?;
    Ok(Writes {
        create,
        append,
        append_sealed,
        append_indexed,
        append_many,
        append_many_sealed,
        same_rows,
        put_index,
        remove,
        remove_before,
    })
}

/// Prepares the reads statements on `client`, for schema `s`.
async fn prepare_reads(client: &Client, s: &str) -> std::result::Result<Reads, PgFailure> {
    let journal = client
        .prepare(&format!(
            "SELECT seq, record FROM {s}.journal WHERE id = $1 AND seq >= $2 AND seq < $3
             ORDER BY seq"
        ))
        .await?;
    let last_seq = client
        .prepare(&format!("SELECT max(seq) FROM {s}.journal WHERE id = $1"))
        .await?;
    let index = client
        .prepare(&format!("SELECT summary FROM {s}.instances WHERE id = $1"))
        .await?;
    let entries = client
        .prepare(&format!(
            "SELECT id, summary FROM {s}.instances ORDER BY id COLLATE \"C\""
        ))
        .await?;
    // On the partial index of the active instances (`instances_active`):
    // the ended ones are not read.
    let active_entries = client
        .prepare(&format!(
            "SELECT id, summary FROM {s}.instances WHERE active AND owner = $1
             ORDER BY id COLLATE \"C\""
        ))
        .await?;
    let entries_where = client
        .prepare(&format!(
            "SELECT id, summary FROM {s}.instances
             WHERE ($1::text IS NULL OR status IS NULL OR status = $1)
               AND ($2::text IS NULL OR workflow IS NULL OR workflow = $2)
             ORDER BY id COLLATE \"C\""
        ))
        .await?;
    // Tail by snapshot: only rows of transactions older than every one
    // still running, which are final, in (tx, id, seq) order; a row
    // that commits later belongs to a newer transaction, so it comes
    // after every row read so far.
    let tail_start = client
        .prepare("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        .await?;
    let tail = client
        .prepare(&format!(
            "SELECT tx::text::bigint, id, seq, record FROM {s}.journal
             WHERE tx < pg_snapshot_xmin(pg_current_snapshot())
               AND (tx, id, seq) > ($1::text::xid8, $2, $3)
             ORDER BY tx, id, seq LIMIT $4"
        ))
        .await?;
    Ok(Reads {
        journal,
        last_seq,
        index,
        entries,
        active_entries,
        entries_where,
        tail_start,
        tail,
    })
}

/// Prepares the posts and claims statements on `client`, for schema `s`.
async fn prepare_others(
    client: &Client,
    s: &str,
    channel: &str,
) -> std::result::Result<Others, PgFailure> {
    // The owner is told on the schema's channel.
    let post = client
        .prepare(&format!(
            "WITH p AS (INSERT INTO {s}.inbox (id, intent, token) VALUES ($1, $2, $3)
                        ON CONFLICT (token) DO NOTHING RETURNING 1)
             SELECT count(pg_notify('{channel}',
                    'post:' || coalesce((SELECT owner FROM {s}.instances WHERE id = $1), '')))
             FROM p"
        ))
        .await?;
    let posts = client
        .prepare(&format!(
            "WITH unread AS (DELETE FROM {s}.inbox
                             WHERE answered_at < now() - interval '10 minutes')
             SELECT p.n, p.id, p.intent FROM {s}.inbox p JOIN {s}.instances i ON i.id = p.id
             WHERE i.owner = $2 AND p.answer IS NULL ORDER BY p.n LIMIT $1"
        ))
        .await?;
    // An answer no poster read (it gave up, or died) is removed by the
    // owner's next look at its inbox, ten minutes on.
    let answer_post = client
        .prepare(&format!(
            "WITH a AS (UPDATE {s}.inbox p SET answer = $3, answered_at = now() WHERE p.n = $1
                        AND EXISTS (SELECT 1 FROM {s}.instances i
                                    WHERE i.id = p.id AND i.owner = $2 FOR SHARE)
                        RETURNING p.token)
             SELECT count(pg_notify('{channel}', 'stopped')) FROM a"
        ))
        .await?;
    let answer = client
        .prepare(&format!("SELECT answer FROM {s}.inbox WHERE token = $1"))
        .await?;
    let forget_post = client
        .prepare(&format!("DELETE FROM {s}.inbox WHERE token = $1"))
        .await?;
    let owner_live = client
        .prepare(&format!(
            "SELECT EXISTS (SELECT 1 FROM {s}.workers w
                            WHERE w.name = i.owner AND w.expires_at > now())
             FROM {s}.instances i WHERE i.id = $1"
        ))
        .await?;
    // Instances that must run (or have posts waiting) and whose owner
    // is gone, of the workflows this worker runs (an index entry from
    // before migration 3 names none): on a queue, those that hold a
    // slot, or that gave theirs back while they wait (a waiting one
    // never waited in its queue since: those the takes take). Rows
    // another worker is claiming are skipped, not waited for.
    let claim = client
        .prepare(&format!(
            "WITH c AS (SELECT i.id FROM {s}.instances i
                        WHERE i.id IN (SELECT id FROM {s}.instances
                                       WHERE active AND (queue IS NULL OR queue_taken OR status = 'waiting')
                                       UNION SELECT id FROM {s}.inbox WHERE answer IS NULL)
                          AND (i.workflow IS NULL OR i.workflow = ANY($2))
                          AND i.needs & ~{NEEDS_SEALED} <= {}
                          AND {}
                        LIMIT $3
                        FOR UPDATE OF i SKIP LOCKED)
             UPDATE {s}.instances i SET owner = $1, owned_since = now()
             FROM c WHERE i.id = c.id RETURNING i.id",
            crate::codec::RECORD_KINDS,
            lease::orphan(s)
        ))
        .await?;
    let disown = client
        .prepare(&format!(
            "UPDATE {s}.instances SET owner = NULL, owned_since = now()
             WHERE id = $1 AND owner = $2 AND queue IS NOT NULL AND NOT queue_taken"
        ))
        .await?;
    let unindexed = client
        .prepare(&format!(
            "SELECT id FROM {s}.instances WHERE facts IS NULL ORDER BY id LIMIT $1"
        ))
        .await?;
    // Derived data, written whoever owns the row, and only where it
    // is missing: a worker that wrote facts since is not undone.
    let backfill = client
        .prepare(&format!(
            "UPDATE {s}.instances SET {}, started_at = coalesce(started_at, $8)
             WHERE id = $1 AND facts IS NULL",
            fact_sets(2)
        ))
        .await?;
    let owner_of = client
        .prepare(&format!(
            "SELECT owner, coalesce(owned_since, w.started_at, now())
             FROM {s}.instances i LEFT JOIN {s}.workers w ON w.name = i.owner
             WHERE i.id = $1 AND i.owner IS NOT NULL"
        ))
        .await?;
    Ok(Others {
        post,
        posts,
        answer_post,
        answer,
        forget_post,
        owner_live,
        claim,
        disown,
        unindexed,
        backfill,
        owner_of,
    })
}
