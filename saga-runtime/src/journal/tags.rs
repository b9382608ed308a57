//! Tags: string pairs that say what an instance is about (`customer` =
//! `42`), to find it by, and the instance that started it. Recorded by a
//! `Described` record, given at start or by `ctx.tag`; limited in count
//! and size so an index entry stays small.

use super::{Change, InstanceState};
use crate::error::{Error, Result};

/// The most tags one instance holds.
pub const MAX_TAGS: usize = 32;
/// The longest tag value, in bytes.
pub const MAX_TAG_VALUE_BYTES: usize = 256;

/// Checks a tag: its key follows the step-name grammar, its value is at
/// most [`MAX_TAG_VALUE_BYTES`] of printable text.
pub(crate) fn check_tag(key: &str, value: &str) -> Result<()> {
    crate::names::check_name("tag", key).map_err(|reason| Error::InvalidTag {
        key: key.to_owned(),
        reason,
    })?;
    let reason = if value.len() > MAX_TAG_VALUE_BYTES {
        format!(
            "its value is {} bytes, over the limit of {MAX_TAG_VALUE_BYTES}",
            value.len()
        )
    } else if let Some(c) = value.chars().find(|c| c.is_control()) {
        format!("its value contains the control character {c:?}")
    } else {
        return Ok(());
    };
    Err(Error::InvalidTag {
        key: key.to_owned(),
        reason,
    })
}

/// The record that names `parent` as the parent of an instance that
/// names none yet (a child whose creation a crash cut short), or `None`.
/// It may follow the instance's end (see `Journal::write`'s guard).
pub(crate) fn parent_link(state: &InstanceState, parent: &str) -> Option<Change> {
    state.parent.is_none().then(|| Change::Described {
        parent: Some(parent.to_owned()),
        tags: Vec::new(),
    })
}

/// The record that gives `state` the `tags` it lacks (and `parent`, if it
/// has none yet), or none when it has them all: a tag given again (a
/// replay, a repeated start) records nothing. Over [`MAX_TAGS`] is
/// [`Error::TooManyTags`]; an instance that ended takes none.
pub(crate) fn described(
    id: &str,
    state: &InstanceState,
    parent: Option<&str>,
    tags: &[(String, String)],
) -> Result<Option<Change>> {
    let mut new: Vec<(String, String)> = Vec::new();
    for (key, value) in tags {
        check_tag(key, value)?;
        new.retain(|(k, _)| k != key);
        if state.tags.get(key) != Some(value) {
            new.push((key.clone(), value.clone()));
        }
    }
    let parent = parent.filter(|_| state.parent.is_none());
    if new.is_empty() && parent.is_none() {
        return Ok(None);
    }
    let keys = state.tags.len()
        + new
            .iter()
            .filter(|(k, _)| !state.tags.contains_key(k))
            .count();
    if keys > MAX_TAGS {
        return Err(Error::TooManyTags {
            id: id.to_owned(),
            limit: MAX_TAGS,
        });
    }
    if state.status.is_terminal() {
        return Err(Error::InvalidState {
            id: id.to_owned(),
            status: state.status,
            operation: "tag it",
        });
    }
    Ok(Some(Change::Described {
        parent: parent.map(str::to_owned),
        tags: new,
    }))
}
