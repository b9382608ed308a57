//! The control commands: each writes its intent into the instance's
//! journal through the public API. The engine that drives the instance
//! acts on it: this one if it registered the instance's workflow,
//! otherwise the application's, when it opens the store.

use std::io::Write;

use super::CliError;
use super::args::{IdArg, RestartArgs, SendEventArgs, TerminateArgs};
use crate::engine::Engine;
use crate::instance::Instance;

pub(crate) async fn send_event(
    engine: &Engine,
    args: &SendEventArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    // Checked first, so an unknown id is named as such.
    let instance = engine.instance(&args.id).await?;
    engine
        .send_event(&args.id, &args.event_type, &args.payload)
        .await?;
    writeln!(out, "sent event {:?} to {}", args.event_type, args.id)?;
    report(&instance, out).await
}

pub(crate) async fn pause(
    engine: &Engine,
    args: &IdArg,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    instance.pause().await?;
    writeln!(
        out,
        "paused {} (it stops at its next step boundary)",
        args.id
    )?;
    report(&instance, out).await
}

pub(crate) async fn resume(
    engine: &Engine,
    args: &IdArg,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    instance.resume().await?;
    writeln!(out, "resumed {}", args.id)?;
    report(&instance, out).await
}

pub(crate) async fn terminate(
    engine: &Engine,
    args: &TerminateArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    if args.rollback {
        instance.terminate_with_rollback().await?;
        if instance.status().await?.is_terminal() {
            writeln!(out, "terminated {} after its compensations ran", args.id)?;
        } else {
            writeln!(out, "terminating {}: its compensations run first", args.id)?;
        }
    } else {
        instance.terminate().await?;
        writeln!(out, "terminated {}", args.id)?;
    }
    report(&instance, out).await
}

pub(crate) async fn restart(
    engine: &Engine,
    args: &RestartArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    match &args.from {
        Some(step) => {
            instance.restart_from(step).await?;
            writeln!(out, "restarted {} from step {step:?}", args.id)?;
        }
        None => {
            instance.restart().await?;
            writeln!(out, "restarted {} from the beginning", args.id)?;
        }
    }
    report(&instance, out).await
}

pub(crate) async fn retry_rollback(
    engine: &Engine,
    args: &IdArg,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    instance.retry_rollback().await?;
    writeln!(
        out,
        "retrying the rollback of {}: the compensations that did not complete run again, with the same keys",
        args.id
    )?;
    report(&instance, out).await
}

/// The status now, and who acts on the intent when no one here can.
async fn report(instance: &Instance, out: &mut impl Write) -> Result<(), CliError> {
    let info = instance.info().await?;
    writeln!(out, "status: {}", info.status)?;
    if !info.workflow_registered && !info.status.is_terminal() {
        writeln!(
            out,
            "workflow {:?} is not registered here: an engine that registers it acts on this when it opens the store",
            info.workflow
        )?;
    }
    Ok(())
}
