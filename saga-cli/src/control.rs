//! The control commands: each writes its intent into the instance's
//! journal through the public API. The engine that drives the instance
//! acts on it: this one if it registered the instance's workflow,
//! otherwise the application's, when it opens the store. On an engine that
//! only reads (PostgreSQL, beside running workers), the intent is posted to
//! the worker that drives the instance, which acts on it within moments.

use std::io::Write;

use crate::CliError;
use crate::args::{IdArg, RestartArgs, SendEventArgs, TerminateArgs, UpdateArgs};
use crate::output::escape;
use saga_runtime::Engine;
use saga_runtime::Instance;

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
    said(
        engine,
        out,
        &args.id,
        &format!("sent event {:?} to {}", args.event_type, args.id),
        &format!("take event {:?}", args.event_type),
    )?;
    report(engine, &instance, out).await
}

/// Sends an update and prints the workflow's reply as JSON. The update is
/// kept when no reply comes within the timeout: a call again with the
/// same `--id` prints its reply once there is one.
pub(crate) async fn update(
    engine: &Engine,
    args: &UpdateArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    let update_id = args.update_id.clone().unwrap_or_else(new_update_id);
    let call =
        instance.update_with_id::<serde_json::Value, _>(&args.name, &update_id, &args.request);
    let waited = std::time::Duration::from_secs(args.timeout);
    let Ok(reply) = tokio::time::timeout(waited, call).await else {
        return Err(CliError::failed(format!(
            "no reply to update {} of {} within {} seconds; it is kept: run again with --id {} to get its reply",
            escape(&format!("{update_id:?}")),
            args.id,
            args.timeout,
            escape(&update_id),
        )));
    };
    writeln!(out, "{}", reply?)?;
    Ok(())
}

/// An update id for a call that gave none: the time in nanoseconds.
fn new_update_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("saga-cli-{nanos}")
}

pub(crate) async fn pause(
    engine: &Engine,
    args: &IdArg,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    instance.pause().await?;
    said(
        engine,
        out,
        &args.id,
        &format!("paused {} (it stops at its next step boundary)", args.id),
        "pause it",
    )?;
    report(engine, &instance, out).await
}

pub(crate) async fn resume(
    engine: &Engine,
    args: &IdArg,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    instance.resume().await?;
    said(
        engine,
        out,
        &args.id,
        &format!("resumed {}", args.id),
        "resume it",
    )?;
    report(engine, &instance, out).await
}

pub(crate) async fn terminate(
    engine: &Engine,
    args: &TerminateArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    if engine.reads_only() {
        if args.rollback {
            instance.terminate_with_rollback().await?;
        } else {
            instance.terminate().await?;
        }
        let (done, asked) = if args.rollback {
            (
                format!("terminating {} with rollback", args.id),
                "terminate it after its compensations",
            )
        } else {
            (format!("terminated {}", args.id), "terminate it")
        };
        said(engine, out, &args.id, &done, asked)?;
    } else if args.rollback {
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
    report(engine, &instance, out).await
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
            said(
                engine,
                out,
                &args.id,
                &format!("restarted {} from step {step:?}", args.id),
                &format!("restart it from step {step:?}"),
            )?;
        }
        None => {
            instance.restart().await?;
            said(
                engine,
                out,
                &args.id,
                &format!("restarted {} from the beginning", args.id),
                "restart it from the beginning",
            )?;
        }
    }
    report(engine, &instance, out).await
}

pub(crate) async fn retry_rollback(
    engine: &Engine,
    args: &IdArg,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    instance.retry_rollback().await?;
    said(
        engine,
        out,
        &args.id,
        &format!(
            "retrying the rollback of {}: the compensations that did not complete run again, with the same keys",
            args.id
        ),
        "retry its rollback",
    )?;
    report(engine, &instance, out).await
}

/// What was done; on an engine that only reads, by the driving worker,
/// which answered (a refusal, or no answer in time, is an error instead).
fn said(
    engine: &Engine,
    out: &mut impl Write,
    id: &str,
    done: &str,
    asked: &str,
) -> std::io::Result<()> {
    if engine.reads_only() {
        writeln!(
            out,
            "{done} (the worker that drives {id} was asked to {asked}, and did)"
        )
    } else {
        writeln!(out, "{done}")
    }
}

/// The status now, and who acts on the intent when no one here can.
async fn report(
    engine: &Engine,
    instance: &Instance,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let info = instance.info().await?;
    writeln!(out, "status: {}", info.status)?;
    if !info.workflow_registered && !info.status.is_terminal() && !engine.reads_only() {
        writeln!(
            out,
            "workflow {} is not registered here: an engine that registers it acts on this when it opens the store",
            escape(&format!("{:?}", info.workflow))
        )?;
    }
    Ok(())
}
