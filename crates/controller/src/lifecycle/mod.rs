//! Node lifecycle: the loops that take a NodeClaim from launched to registered and initialized
//! ([`registration`]), delete claims that never got there ([`liveness`]), drain and release
//! what is being deleted ([`termination`]) and collect what nobody claims ([`gc`]). They share
//! the Kubernetes toolbox in [`crate::k8s`]; disruption and interruption will sit beside this
//! folder and end nodes through [`termination`].
//!
//! Every pass is level-triggered over the reflector stores: it compares what the stores say with
//! what should be and makes one step towards it, so a missed watch event, a crash or a 409 only
//! delays the next step to the next pass. Passes are cheap (no request unless something must
//! change), so the fast loop runs about every second and the garbage collector, which lists the
//! cloud, every `settings.sweep_interval`.

pub mod gc;
pub mod liveness;
pub mod registration;
pub mod termination;

use std::sync::Arc;
use std::time::Duration;

use joiner_core::CloudProvider;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::reconcile::every;
pub use crate::reconcile::LifecycleError;
use gc::Collector;
use termination::Terminator;

/// How often the registration, liveness and termination passes run.
pub const FAST_INTERVAL: Duration = Duration::from_secs(1);

/// Drives every lifecycle loop until `stop` is cancelled: registration, liveness and termination
/// about every [`FAST_INTERVAL`], garbage collection every `settings.sweep_interval`. Each loop
/// runs on its own (they are polled concurrently), so a slow pass of one — a drain waiting on
/// the API server, a cloud listing — never delays registration or liveness of other claims. A
/// failed pass is logged and counted in `reconcile_errors{controller}`; the loop goes on, since
/// the next pass retries from the stores.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>, stop: CancellationToken) {
    let registrar = registration::Registrar::default();
    let terminator = Terminator::default();
    let collector = Collector::default();
    tokio::join!(
        every!(
            ctx,
            stop,
            FAST_INTERVAL,
            "registration",
            registrar.reconcile(&ctx)
        ),
        every!(
            ctx,
            stop,
            FAST_INTERVAL,
            "liveness",
            liveness::reconcile(&ctx)
        ),
        every!(
            ctx,
            stop,
            FAST_INTERVAL,
            "termination",
            terminator.reconcile(&ctx)
        ),
        every!(
            ctx,
            stop,
            ctx.settings.sweep_interval,
            "gc",
            collector.sweep(&ctx)
        ),
    );
    tracing::info!("lifecycle loops stopped");
}
