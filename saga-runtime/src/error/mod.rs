//! The one error type of the engine's API.
//!
//! Also here: `failure`, the failures users see (`Failure`,
//! `StepError`, `WorkflowError`), and `convert`, how their own errors
//! become them.

pub(crate) mod convert;
pub(crate) mod failure;

use std::path::PathBuf;

use crate::error::failure::Failure;
use crate::model::status::Status;

/// A `Result` whose error is [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when talking to the engine.
///
/// Every variant says what happened and, in its documentation and message,
/// what to do about it. Nothing that was already stored is lost when one of
/// these is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The instance id is not 1–100 characters of `[A-Za-z0-9_-]` starting
    /// with a letter, digit or `_`. Choose another id.
    #[error(
        "invalid instance id {id:?}: {reason}; use 1-100 characters of [A-Za-z0-9_-], not starting with '-'"
    )]
    InvalidInstanceId {
        /// The id as given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// No instance with this id exists (it was never started, or it finished
    /// and the retention period removed it). Check the id, or start it.
    #[error("no instance {id:?} exists; start it with engine.start(..) or check the id")]
    UnknownInstance {
        /// The id asked for.
        id: String,
    },

    /// The id is already used by an instance of another workflow. Ids are
    /// unique across workflows; pick another id.
    #[error(
        "instance id {id:?} is already used by workflow {existing:?}, not {requested:?}; choose another id"
    )]
    InstanceIdInUse {
        /// The id.
        id: String,
        /// The workflow the existing instance runs.
        existing: String,
        /// The workflow that was asked for.
        requested: String,
    },

    /// `start` named an instance that exists with a different input. An id
    /// names one instance: start it with the input it has, or pick
    /// another id.
    #[error(
        "instance {id:?} exists with a different input; an id names one instance: pass the same input or choose another id"
    )]
    InputMismatch {
        /// The id.
        id: String,
    },

    /// An event was sent with an id this instance already received with
    /// another type or payload. Event ids name one event: send the same
    /// payload again (it is a no-op) or use a new id.
    #[error(
        "instance {id:?} already received event id {event_id:?} with another type or payload; use a new event id for a new event"
    )]
    EventIdConflict {
        /// The instance.
        id: String,
        /// The event id.
        event_id: String,
    },

    /// `update(name, ..)` named an update the instance's workflow does not
    /// declare (`#[workflow(updates = [..])]`): it would never take it.
    /// Nothing was sent. Use a name the workflow declares.
    #[error(
        "instance {id:?} runs workflow {workflow:?}, which takes no update named {update:?}; it takes {declared:?}"
    )]
    UpdateNotDeclared {
        /// The instance.
        id: String,
        /// Its workflow.
        workflow: String,
        /// The update asked for.
        update: String,
        /// The updates the workflow declares.
        declared: Vec<String>,
    },

    /// The workflow's update validator rejected the request, before
    /// anything was recorded. Fix the request, or send another.
    #[error("instance {id:?} rejected update {update:?}: {reason}")]
    UpdateRejected {
        /// The instance.
        id: String,
        /// The update's name.
        update: String,
        /// What the validator said.
        reason: String,
    },

    /// The instance ended without replying to the update `update_id`: it
    /// took it and did not reply, or ended before taking it. Nothing more
    /// will answer it; start another instance or send it elsewhere.
    #[error("instance {id:?} ended ({status}) without replying to update {update_id:?}")]
    UpdateNotAnswered {
        /// The instance.
        id: String,
        /// The update's id.
        update_id: String,
        /// How the instance ended.
        status: Status,
    },

    /// `restart_from(step)` named a step the instance never started.
    /// Use a name from `history()`.
    #[error(
        "instance {id:?} has no step named {step:?} in its history; pick a step from history()"
    )]
    UnknownStep {
        /// The instance.
        id: String,
        /// The step asked for.
        step: String,
    },

    /// `restart_from(step)` would keep a step whose compensation ran (or
    /// began): its effect was undone, so keeping its output would act on
    /// something that no longer stands. Restart from the beginning with
    /// `restart()`: every step then runs again, with new idempotency keys.
    #[error(
        "instance {id:?} cannot restart from step {step:?}: step {compensated:?} before it was compensated, so its effect was undone; use restart() to run the whole workflow again"
    )]
    RestartAfterCompensation {
        /// The instance.
        id: String,
        /// The step asked for.
        step: String,
        /// A step before it whose compensation ran.
        compensated: String,
    },

    /// The instance is `Blocked`: its workflow code no longer matches its
    /// history (or a stored value no longer decodes). It is not ended.
    /// Deploy a release that matches again (e.g. declare the rename with
    /// `renamed_from`), or decide: `terminate_with_rollback()` compensates
    /// the started steps from history, `terminate()` ends it as it is.
    #[error(
        "instance {id:?} is blocked: {failure}; deploy code that matches its history (e.g. with renamed_from), or end it with terminate_with_rollback() or terminate()"
    )]
    Blocked {
        /// The instance.
        id: String,
        /// Why it is blocked.
        failure: Box<Failure>,
    },

    /// The instance's workflow is not registered in this process, so it
    /// cannot run. Call `engine.register(workflow)` with it.
    #[error(
        "instance {id:?} runs workflow {workflow:?}, which is not registered in this process; call engine.register(..) with it"
    )]
    WorkflowNotRegistered {
        /// The instance.
        id: String,
        /// The workflow name stored with it.
        workflow: String,
    },

    /// Another workflow is registered under this name in this engine. A
    /// workflow's name is its identity in the store: give each one its own.
    #[error(
        "another workflow is already registered under the name {name:?}; workflow names must be unique"
    )]
    WorkflowNameTaken {
        /// The name.
        name: String,
    },

    /// A step (or rollback handler) of the workflow takes a `Service<T>`
    /// that was not provided to the engine. Add
    /// `Engine::builder().provide(..)` with it.
    #[error(
        "workflow {workflow:?} needs a service of type `{service}`, which was not provided to the engine; add Engine::builder().provide(..) with it"
    )]
    MissingService {
        /// The workflow.
        workflow: String,
        /// The Rust type of the service.
        service: String,
    },

    /// The operation does not apply to an instance in this status (pausing a
    /// finished instance, sending an event to a finished instance, ...).
    #[error("instance {id:?} is {status}: cannot {operation}")]
    InvalidState {
        /// The instance.
        id: String,
        /// Its status when the operation was asked for.
        status: Status,
        /// What was asked.
        operation: &'static str,
    },

    /// The instance ended `Errored`. `failure` is the error that failed the
    /// workflow; `rollback_failure`, when set, is a compensation that failed
    /// too (the remaining compensations did not run). When the workflow
    /// returned its own error type `E`, `failure.downcast::<E>()` gives it
    /// back.
    #[error("instance {id:?} failed: {failure}{}", rollback_failure.as_ref().map(|f| format!("; rollback also failed: {f}")).unwrap_or_default())]
    WorkflowFailed {
        /// The instance.
        id: String,
        /// Why the workflow failed.
        failure: Box<Failure>,
        /// The compensation that failed, if one did.
        rollback_failure: Option<Box<Failure>>,
    },

    /// The instance was terminated by a user before it finished.
    #[error("instance {id:?} was terminated")]
    Terminated {
        /// The instance.
        id: String,
        /// A compensation that failed during `terminate_with_rollback`, if one did.
        rollback_failure: Option<Box<Failure>>,
    },

    /// The instance completed, and was then undone: it is a child workflow
    /// whose parent rolled back, and its compensations ran. Its output
    /// no longer stands.
    #[error("instance {id:?} completed, then was compensated: its parent rolled back")]
    Compensated {
        /// The instance.
        id: String,
        /// A compensation of it that gave up, if one did.
        rollback_failure: Option<Box<Failure>>,
    },

    /// A workflow calls a child workflow (`ctx.child`) that is not
    /// registered: register the child's workflow first (or in the same
    /// builder), so no instance of the parent can reach a child that no
    /// worker runs.
    #[error(
        "workflow {workflow:?} starts child workflow {child:?} (call {call:?}), which is not registered: register {child:?} too, before or together with {workflow:?}"
    )]
    ChildNotRegistered {
        /// The parent workflow.
        workflow: String,
        /// The child call's name.
        call: String,
        /// The child's workflow.
        child: String,
    },

    /// Another process holds the store's lock. Only one process may open a
    /// data directory at a time: stop the other one, or use another directory.
    #[error(
        "the store at {path:?} is locked by another process; stop that process or open another directory"
    )]
    StoreLocked {
        /// The data directory.
        path: PathBuf,
    },

    /// This process holds the store open already (another `Engine` on the
    /// same directory, not yet closed). Share that engine (it is `Clone`)
    /// instead of opening the store again, or `close()` it first.
    #[error(
        "the store at {path:?} is already open in this process: share the Engine that opened it (it is Clone), or close() that one before opening it again"
    )]
    StoreOpenInThisProcess {
        /// The data directory.
        path: PathBuf,
    },

    /// The store failed (I/O error, disk full, ...). Nothing acknowledged
    /// before was lost; fix the cause and reopen.
    #[error("store error: {0}")]
    Store(String),

    /// A stored record does not decode: the store was damaged, or written by
    /// an incompatible version. The record is left as it is.
    #[error("corrupt record ({what}): {detail}; the record was left untouched")]
    Corrupt {
        /// Which record.
        what: String,
        /// What the decoder said.
        detail: String,
    },

    /// A payload (workflow input, step output, event payload) is over the
    /// configured size limit. Store a reference (a key, a URL) instead, or
    /// raise the limit with `EngineBuilder::max_payload_bytes`.
    #[error(
        "{what} is {size} bytes (as JSON, before the engine's codec encodes it), {} bytes over the limit of {limit} bytes; store a reference instead or raise EngineBuilder::max_payload_bytes",
        size.saturating_sub(*limit)
    )]
    PayloadTooLarge {
        /// What was too large.
        what: String,
        /// Its size as JSON, before the engine's codec (if any) encodes it.
        size: usize,
        /// The limit in force.
        limit: usize,
    },

    /// A value could not be encoded with serde.
    #[error("could not encode {what}: {detail}")]
    Encode {
        /// What was encoded.
        what: String,
        /// What serde said.
        detail: String,
    },

    /// A stored value no longer decodes into the type the code asks for (the
    /// type changed since it was stored). Keep the old type, or restart the
    /// instance.
    #[error(
        "stored {what} does not decode as `{type_name}`: {detail}; keep the old type or restart the instance"
    )]
    Decode {
        /// What was decoded.
        what: String,
        /// The Rust type asked for.
        type_name: &'static str,
        /// What the decoder said.
        detail: String,
    },

    /// An argument is out of range (a duration, a limit). The message says which.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The engine needs a Tokio runtime: call it from within one
    /// (`#[tokio::main]`, `#[tokio::test]`).
    #[error("no Tokio runtime is running; open the engine from within #[tokio::main] or a Runtime")]
    NoRuntime,

    /// The engine was closed.
    #[error("the engine was closed")]
    Closed,

    /// The PostgreSQL database could not be reached (feature `postgres`).
    /// Check that it runs and that the URL (host, port, user, database)
    /// is right.
    #[error("could not connect to PostgreSQL at {url}: {detail}; check that it runs and the URL")]
    DatabaseUnreachable {
        /// The database, without its password.
        url: String,
        /// What the driver said.
        detail: String,
    },

    /// The engine only reads (it connected with
    /// `EngineBuilder::connect_read_only`): it cannot start, change or
    /// control instances. Do that from a worker (`EngineBuilder::connect`).
    #[error(
        "{what}: this engine only reads (connect_read_only); do it from a worker connected with Engine::connect"
    )]
    ReadOnly {
        /// What was refused.
        what: String,
    },

    /// This worker's lease on the database ran out while it did not renew
    /// it (it was stopped or cut off for longer than the lease), and other
    /// workers may have claimed its instances. It may no longer write: what
    /// it did not flush is resumed by the workers that claim them. Restart
    /// the process.
    #[error(
        "this worker lost its lease on the database: {detail}; it writes nothing more: restart it"
    )]
    Fenced {
        /// Whose lease, and how it was lost.
        detail: String,
    },

    /// The instance holds a record of a kind this release does not know:
    /// a newer release of saga wrote it. This release leaves the instance
    /// alone (it neither runs nor parks it); the workers of the newer
    /// release run it. During a rolling deploy that is expected; otherwise
    /// upgrade this process.
    #[error(
        "instance {id:?} was written by a newer release of saga ({detail}); this release leaves it alone: let the newer release's workers run it, or upgrade"
    )]
    NewerRelease {
        /// The instance.
        id: String,
        /// What this release could not read.
        detail: String,
    },

    /// The call was posted to the worker that drives the instance (another
    /// process), which has not answered within the store timeout. The
    /// post is kept: the owner acts on it when it can, or, when its lease
    /// is not live, the worker that claims the instance does. Look at the
    /// instance's status later, rather than calling again.
    #[error(
        "posted to the worker that drives instance {id:?}, which has not answered yet; {}",
        if *owner_live {
            "its lease is live: it acts on the call when it can"
        } else {
            "it has no live worker: the worker that claims the instance acts on the call"
        }
    )]
    NotAnswered {
        /// The instance.
        id: String,
        /// Whether the owner's lease was live when the wait gave up.
        owner_live: bool,
    },

    /// The worker that drives the instance (another process) refused the
    /// posted call, for `reason`, as it would refuse the same call of its
    /// own. Nothing changed.
    #[error("the worker that drives instance {id:?} refused the call: {reason}")]
    Refused {
        /// The instance.
        id: String,
        /// Why, as the owner said.
        reason: String,
    },

    /// The PostgreSQL schema does not exist, and this connection only
    /// reads (`connect_read_only`, the `saga` command), so it creates
    /// nothing. Check the schema's name (`EngineBuilder::postgres_schema`;
    /// for the `saga` command, `--schema` or `SAGA_DATABASE_SCHEMA`), or
    /// connect a worker (`Engine::connect`) once to create it.
    #[error(
        "the PostgreSQL schema {schema:?} does not exist; check its name (EngineBuilder::postgres_schema, or the saga command's --schema / SAGA_DATABASE_SCHEMA), or connect a worker (Engine::connect) to create it"
    )]
    SchemaMissing {
        /// The schema asked for.
        schema: String,
    },

    /// The PostgreSQL schema is at an older migration version than this
    /// release expects, and this connection only reads, so it migrates
    /// nothing. Connect a worker of this release (`Engine::connect`), which
    /// migrates it, or read it with the release its workers run.
    #[error(
        "the PostgreSQL schema {schema:?} is at migration version {version}, and this release expects version {expected}; connect a worker of this release (Engine::connect) to migrate it, or read it with the release its workers run"
    )]
    SchemaOutdated {
        /// The schema.
        schema: String,
        /// Its migration version (0: it has no saga tables).
        version: i32,
        /// The version this release reads.
        expected: i32,
    },

    /// The PostgreSQL schema was migrated by a newer release, past what
    /// this release may read and write: its newest migration declares that
    /// only releases of schema version `compatible_from` or later may use
    /// it, and this one is at `release`. Upgrade this worker (or reader)
    /// to the release that migrated the schema, or a later one. (A newer
    /// schema whose migrations are all additive declares an older
    /// `compatible_from`, and this release opens it.)
    #[error(
        "the PostgreSQL schema {schema:?} is at migration version {version}, which only releases of schema version {compatible_from} or later may use, and this release is at schema version {release}; upgrade this worker to the release that migrated the schema, or a later one"
    )]
    SchemaNewer {
        /// The schema.
        schema: String,
        /// Its migration version.
        version: i32,
        /// The oldest release schema version that may read and write it.
        compatible_from: i32,
        /// The schema version this release knows.
        release: i32,
    },

    /// The PostgreSQL schema, or a table in it, belongs to a role that the
    /// worker's role is not a member of: a worker does not adopt what
    /// another role made, which that role could read or change behind it.
    /// Connect as that role (or a member of it), hand the objects over
    /// (`ALTER SCHEMA .. OWNER TO`, `ALTER TABLE .. OWNER TO`), or choose
    /// another schema.
    #[error(
        "the PostgreSQL {object} belongs to role {owner}, which this connection's role is not a member of; connect as that role, change its owner (ALTER .. OWNER TO), or choose another schema"
    )]
    SchemaForeignOwner {
        /// The schema or table, qualified.
        object: String,
        /// The role that owns it.
        owner: String,
    },

    /// Triggers that saga did not make sit on the tables of its PostgreSQL
    /// schema: someone else's code would run inside every write. Drop them
    /// (`DROP TRIGGER name ON table`), or choose another schema.
    #[error(
        "the PostgreSQL schema {schema:?} has triggers that saga did not make: {}; drop them (DROP TRIGGER name ON table) or choose another schema",
        triggers.join(", ")
    )]
    SchemaForeignTriggers {
        /// The schema.
        schema: String,
        /// Each trigger, as `name ON schema.table`.
        triggers: Vec<String>,
    },

    /// An event was sent to an instance that holds as much as it may:
    /// `limit` pending events (sent and not yet taken by a
    /// `wait_for_event`), or `limit` records in its journal. Nothing was
    /// stored. Send only events the workflow waits for (or let it take
    /// them first), continue a long-running loop as a new instance, or
    /// raise `EngineBuilder::max_pending_events` /
    /// `EngineBuilder::max_journal_records`.
    #[error(
        "instance {id:?} holds {limit} {of}, its limit: the event was not stored; send only events it waits for, continue a long loop as a new instance, or raise EngineBuilder::max_pending_events / max_journal_records"
    )]
    InstanceFull {
        /// The instance.
        id: String,
        /// The limit reached.
        limit: u64,
        /// What it holds: `"pending events"` or `"journal records"`.
        of: &'static str,
    },

    /// The certificate of the PostgreSQL server did not verify
    /// (`sslmode=verify-full` or `verify-ca`): its chain does not reach a
    /// trusted root, or it does not name the host connected to. Nothing
    /// was sent; it is not retried, and never falls back to plain text.
    #[error(
        "the TLS certificate of PostgreSQL at {host} did not verify: {detail}; give the CA that signed it with sslrootcert=/path/to/ca.pem, and connect by a name the certificate holds (verify-full checks it)"
    )]
    TlsCertificate {
        /// The host connected to, as the URL names it.
        host: String,
        /// What rustls said of the certificate.
        detail: String,
    },

    /// The TLS handshake with the PostgreSQL server failed for another
    /// reason than its certificate: it offers no TLS while the `sslmode`
    /// requires it, it wants a client certificate (`sslcert`/`sslkey`), or
    /// it speaks no common protocol version. Not retried.
    #[error(
        "the TLS handshake with PostgreSQL at {host} failed: {detail}; check the server's TLS settings, the sslmode, and sslcert/sslkey if it asks for a client certificate"
    )]
    TlsHandshake {
        /// The host connected to, as the URL names it.
        host: String,
        /// What went wrong.
        detail: String,
    },

    /// The PostgreSQL server takes only TLS connections, and the URL says
    /// `sslmode=disable`. Not retried.
    #[error(
        "PostgreSQL at {host} refused a connection without TLS: the server requires TLS: use sslmode=require or verify-full"
    )]
    TlsRequired {
        /// The host connected to, as the URL names it.
        host: String,
    },

    /// A tag's key is not 1-64 characters of `[a-z0-9-]` (the step-name
    /// grammar), or its value is over 256 bytes or holds a control
    /// character. Nothing was stored. Choose another key or a shorter value.
    #[error("invalid tag {key:?}: {reason}")]
    InvalidTag {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// An instance may hold at most `limit` tags. Nothing was stored. Tag
    /// with fewer keys (a value may be a list), or keep the rest in the
    /// input.
    #[error(
        "instance {id:?} would hold more than {limit} tags, its limit: the tag was not stored; use fewer keys"
    )]
    TooManyTags {
        /// The instance.
        id: String,
        /// The limit.
        limit: usize,
    },

    /// A queue given to `EngineBuilder::queue` is not valid: its name does
    /// not follow the step-name grammar, a limit is 0, or it is declared
    /// twice. The engine did not open and nothing was stored: fix the
    /// declaration.
    #[error("invalid queue {queue:?}: {reason}")]
    InvalidQueue {
        /// The queue's name as given.
        queue: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A worker declares a queue with other limits than those the store
    /// holds for it, which another worker declared: two workers would run
    /// one queue by different limits. The worker did not connect. Declare
    /// the stored limits, or change them for every worker: with
    /// `Engine::set_queue_limits` (or `saga queues set`), or with a
    /// declaration marked `Queue::replaces_stored_limits`.
    #[error(
        "queue {queue:?} is declared here with {declared}, but the store holds {stored} (another worker's declaration): declare the same limits, or change them for every worker with `saga queues set {queue}` (Engine::set_queue_limits) or by marking this declaration .replaces_stored_limits()"
    )]
    QueueLimitsDiffer {
        /// The queue.
        queue: String,
        /// The limits this worker declares.
        declared: String,
        /// The limits the store holds.
        stored: String,
    },

    /// `start_on` named a queue this engine did not declare. Nothing was
    /// stored. Declare it with `Engine::builder().queue(Queue::new(..))`
    /// (on every worker), or check the name.
    #[error(
        "no queue {queue:?} is declared (declared: {known:?}); declare it with Engine::builder().queue(Queue::new({queue:?})) on every worker, or check the name"
    )]
    UnknownQueue {
        /// The queue asked for.
        queue: String,
        /// The queues this engine declared.
        known: Vec<String>,
    },

    /// The key given to `start_on(..).key(..)` is not 1-100 characters of
    /// `[A-Za-z0-9_-]` (the instance-id grammar) not starting with `-`.
    /// Nothing was stored: derive a shorter key (a customer number, a
    /// hash of a longer one).
    #[error(
        "invalid queue key {key:?}: {reason}; use 1-100 characters of [A-Za-z0-9_-], not starting with '-'"
    )]
    InvalidQueueKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A stored value is sealed with a key the engine's codec does not hold
    /// (or the engine has no codec): nothing was changed, and the value is
    /// still stored. Open the engine with a codec that holds the key
    /// (`EngineBuilder::codec`; after a rotation, keep the old key in the
    /// keyring): an instance that was parked `Blocked` for it resumes.
    #[error(
        "stored {what} is encrypted with key {key:?}, which the engine's codec does not hold; open the engine with a codec that holds it (EngineBuilder::codec)"
    )]
    MissingKey {
        /// What was to be decoded.
        what: String,
        /// The id of the key it is sealed with.
        key: String,
    },

    /// The engine's codec refused to seal a value: the record that holds it
    /// was not stored. Check the codec (its keys, its randomness source).
    #[error("the engine's codec could not encode a value: {detail}")]
    Codec {
        /// What the codec said.
        detail: String,
    },

    /// A schedule's cron expression does not parse (or never fires).
    /// Nothing was stored: fix the expression.
    #[error(
        "schedule {schedule:?}: invalid cron expression {expression:?}: {reason}; use 5 fields, minute hour day-of-month month day-of-week, e.g. \"0 2 * * *\" (02:00 every day) or \"*/15 9-17 * * MON-FRI\""
    )]
    InvalidCron {
        /// The schedule's name.
        schedule: String,
        /// The expression as given.
        expression: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A schedule names a time zone the time zone database does not know.
    /// Nothing was stored: use an IANA name.
    #[error(
        "schedule {schedule:?}: unknown time zone {zone:?}; use an IANA time zone name, e.g. \"Europe/Paris\" or \"America/New_York\""
    )]
    UnknownTimeZone {
        /// The schedule's name.
        schedule: String,
        /// The time zone as given.
        zone: String,
    },

    /// A schedule's interval (or offset) is zero, does not parse, or is not
    /// a whole number of seconds. Nothing was stored: fix it.
    #[error(
        "schedule {schedule:?}: invalid interval {interval:?}: {reason}; use a whole number of seconds, at least 1, e.g. \"15 minutes\" or \"1 hour\""
    )]
    InvalidInterval {
        /// The schedule's name.
        schedule: String,
        /// The interval as given.
        interval: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A schedule's jitter is zero, does not parse, is not a whole number
    /// of milliseconds, or is not shorter than its interval. Nothing was
    /// stored: fix it.
    #[error(
        "schedule {schedule:?}: invalid jitter {jitter:?}: {reason}; use a whole number of milliseconds, at least 1 and shorter than an interval schedule's interval, e.g. \"30 seconds\""
    )]
    InvalidJitter {
        /// The schedule's name.
        schedule: String,
        /// The jitter as given.
        jitter: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A schedule is declared wrongly otherwise: its name, a policy, a
    /// missing `start`, a name declared twice. Nothing was stored; the
    /// message says what to change.
    #[error("schedule {schedule:?}: {reason}")]
    InvalidSchedule {
        /// The schedule's name.
        schedule: String,
        /// What is wrong, and what to do.
        reason: String,
    },

    /// No schedule of this name is stored (for `pause`, `resume`, `list`),
    /// or, for `trigger`, this engine does not declare it (only an engine
    /// that declares a schedule knows what it starts). Check the name.
    #[error("unknown schedule {name:?}: {reason}")]
    UnknownSchedule {
        /// The name asked for.
        name: String,
        /// Where it was looked for.
        reason: &'static str,
    },
}
