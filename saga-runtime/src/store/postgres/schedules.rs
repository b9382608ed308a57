//! The `schedules` table (migration 8): one row per schedule, its state
//! opaque bytes (`schedule::state`); and the `queues` table (migration
//! 10), one row per queue, its limits (`queue::stored`), used the same
//! way. A swap is one statement, a
//! conditional UPDATE on the old value (or an INSERT that does nothing if
//! the row exists; a removal a DELETE on the old value), so of two workers that advance a schedule at once one
//! changes the row and the other changes nothing and reads again. Run on
//! the pool's connections, which commit synchronously: a swap is durable
//! when it answers. A swap retried after a lost connection may find its
//! own write and answer `false`: the caller reads again and sees it.

use tokio_postgres::Client;

use crate::error::{Error, Result};

/// A table of one opaque value per name.
#[derive(Clone, Copy)]
pub(in crate::store::postgres) enum Table {
    Schedules,
    Queues,
}

impl Table {
    /// The table's name and its value column.
    fn parts(self) -> (&'static str, &'static str) {
        match self {
            Table::Schedules => ("schedules", "state"),
            Table::Queues => ("queues", "limits"),
        }
    }
}

/// A call on the table, its SQL made for the store's schema.
pub(in crate::store::postgres) struct ScheduleCall {
    sql: String,
    name: Option<String>,
    old: Option<Vec<u8>>,
    new: Option<Vec<u8>>,
    kind: Kind,
}

enum Kind {
    All,
    One,
    Swap,
    Remove,
}

/// What a call answers.
pub(in crate::store::postgres) enum ScheduleAnswer {
    States(Vec<(String, Vec<u8>)>),
    State(Option<Vec<u8>>),
    Swapped(bool),
}

impl ScheduleCall {
    /// Every row, by name.
    pub(super) fn all(schema: &str, table: Table) -> ScheduleCall {
        let (t, v) = table.parts();
        ScheduleCall {
            sql: format!("SELECT name, {v} FROM {schema}.{t} ORDER BY name"),
            name: None,
            old: None,
            new: None,
            kind: Kind::All,
        }
    }

    /// The row of `name`.
    pub(super) fn one(schema: &str, table: Table, name: &str) -> ScheduleCall {
        let (t, v) = table.parts();
        ScheduleCall {
            sql: format!("SELECT {v} FROM {schema}.{t} WHERE name = $1"),
            name: Some(name.to_owned()),
            old: None,
            new: None,
            kind: Kind::One,
        }
    }

    /// `new` in place of `old` (`None`: no row yet).
    pub(super) fn swap(
        schema: &str,
        table: Table,
        name: &str,
        old: Option<&[u8]>,
        new: &[u8],
    ) -> ScheduleCall {
        let (t, v) = table.parts();
        let sql = match old {
            None => format!(
                "INSERT INTO {schema}.{t} (name, {v}) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING"
            ),
            Some(_) => format!(
                "UPDATE {schema}.{t} SET {v} = $2, updated_at = now() WHERE name = $1 AND {v} = $3"
            ),
        };
        ScheduleCall {
            sql,
            name: Some(name.to_owned()),
            old: old.map(<[u8]>::to_vec),
            new: Some(new.to_vec()),
            kind: Kind::Swap,
        }
    }

    /// No row in place of `old`.
    pub(super) fn remove(schema: &str, name: &str, old: &[u8]) -> ScheduleCall {
        ScheduleCall {
            sql: format!("DELETE FROM {schema}.schedules WHERE name = $1 AND state = $2"),
            name: Some(name.to_owned()),
            old: Some(old.to_vec()),
            new: None,
            kind: Kind::Remove,
        }
    }

    pub(super) async fn run(
        &self,
        client: &Client,
    ) -> std::result::Result<ScheduleAnswer, tokio_postgres::Error> {
        Ok(match self.kind {
            Kind::All => {
                let rows = client.query(&self.sql, &[]).await?;
                ScheduleAnswer::States(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
            }
            Kind::One => {
                let row = client.query_opt(&self.sql, &[&self.name]).await?;
                ScheduleAnswer::State(row.map(|r| r.get(0)))
            }
            Kind::Swap => {
                let changed = match &self.old {
                    None => client.execute(&self.sql, &[&self.name, &self.new]).await?,
                    Some(old) => {
                        client
                            .execute(&self.sql, &[&self.name, &self.new, old])
                            .await?
                    }
                };
                ScheduleAnswer::Swapped(changed == 1)
            }
            Kind::Remove => {
                let removed = client.execute(&self.sql, &[&self.name, &self.old]).await?;
                ScheduleAnswer::Swapped(removed == 1)
            }
        })
    }
}

impl ScheduleAnswer {
    pub(super) fn states(self) -> Result<Vec<(String, Vec<u8>)>> {
        match self {
            ScheduleAnswer::States(states) => Ok(states),
            _ => Err(unexpected()),
        }
    }

    pub(super) fn state(self) -> Result<Option<Vec<u8>>> {
        match self {
            ScheduleAnswer::State(state) => Ok(state),
            _ => Err(unexpected()),
        }
    }

    pub(super) fn swapped(self) -> Result<bool> {
        match self {
            ScheduleAnswer::Swapped(swapped) => Ok(swapped),
            _ => Err(unexpected()),
        }
    }
}

fn unexpected() -> Error {
    Error::Store("the PostgreSQL thread answered another question".into())
}
