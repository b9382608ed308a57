//! Shared services (database pools, HTTP clients, payment SDKs) provided to
//! the engine once and handed to steps and rollback handlers by type.
//!
//! They are never stored: a replay or a restart gets the services of the
//! process that runs it. A `#[step]` or `#[rollback]` takes one as a
//! parameter of type [`Service<T>`], which the macros recognise like
//! `IdempotencyKey` (it is not one of the caller's inputs); a hand-written
//! body asks its [`StepContext`](crate::StepContext) with
//! `step.service::<T>()`.
//!
//! A missing service is an error before anything runs where the engine can
//! see the need: `register` (and so `start`) checks the services of every
//! `#[step]` a `#[workflow]` calls, and of their rollback handlers. A step
//! it cannot see (a hand-written `ctx.step` body, a step declared or
//! imported inside the workflow's body) fails at its first attempt with a
//! permanent error naming the service, never with a panic.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::error::failure::StepError;

/// A shared service of type `T`, provided with
/// [`EngineBuilder::provide`](crate::EngineBuilder::provide). Dereferences
/// to `T`; cheap to clone.
///
/// ```
/// use saga_runtime::prelude::*;
///
/// struct Payments { /* a client */ }
///
/// impl Payments {
///     async fn charge(&self, cents: u64, key: &str) -> Result<String, std::io::Error> {
///         Ok(format!("ch_{cents}_{key}"))
///     }
/// }
///
/// #[step(name = "charge")]
/// async fn charge(key: IdempotencyKey, payments: Service<Payments>, cents: u64)
///     -> Result<String, std::io::Error> {
///     payments.charge(cents, key.as_str()).await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), saga_runtime::Error> {
/// let engine = Engine::builder().provide(Payments {}).temporary()?;
/// # Ok(())
/// # }
/// ```
pub struct Service<T: ?Sized>(Arc<T>);

impl<T: ?Sized> Service<T> {
    /// The shared handle.
    pub fn arc(&self) -> &Arc<T> {
        &self.0
    }
}

impl<T: ?Sized> Clone for Service<T> {
    fn clone(&self) -> Self {
        Service(self.0.clone())
    }
}

impl<T: ?Sized> Deref for Service<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Service<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// The services of an engine, by type.
#[derive(Clone, Default)]
pub(crate) struct Services {
    by_type: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Services({} provided)", self.by_type.len())
    }
}

impl Services {
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, service: Arc<T>) {
        self.by_type.insert(TypeId::of::<T>(), service);
    }

    /// Adds every service of `other` (shared, not copied).
    pub(crate) fn extend(&mut self, other: &Services) {
        for (type_id, service) in &other.by_type {
            self.by_type.insert(*type_id, service.clone());
        }
    }

    pub(crate) fn contains(&self, need: &ServiceNeed) -> bool {
        self.by_type.contains_key(&(need.type_id)())
    }

    /// The service of type `T`, or the permanent step error that says how
    /// to provide it.
    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Result<Service<T>, StepError> {
        self.by_type
            .get(&TypeId::of::<T>())
            .cloned()
            .and_then(|service| service.downcast::<T>().ok())
            .map(Service)
            .ok_or_else(|| StepError::fatal(missing(std::any::type_name::<T>())))
    }
}

/// The message of a missing service.
pub(crate) fn missing(type_name: &str) -> String {
    format!(
        "no service of type `{type_name}` was provided to the engine; add \
         `Engine::builder().provide(..)` with it"
    )
}

/// A service type a step or rollback handler takes, as `#[step]` lists it
/// for the workflows that call it.
#[derive(Clone, Copy)]
pub struct ServiceNeed {
    /// `TypeId::of::<T>`.
    pub type_id: fn() -> TypeId,
    /// `std::any::type_name::<T>`.
    pub type_name: fn() -> &'static str,
}

impl ServiceNeed {
    /// The need of a `Service<T>`.
    pub const fn of<T: ?Sized + 'static>() -> Self {
        ServiceNeed {
            type_id: TypeId::of::<T>,
            type_name: std::any::type_name::<T>,
        }
    }
}

impl fmt::Debug for ServiceNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str((self.type_name)())
    }
}
