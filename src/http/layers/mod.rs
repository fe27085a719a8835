//! The cross-cutting layers of the API routes, in the order SPEC §3 fixes:
//! rate limit → authz → API metrics → business-activity metrics → handler.
//! Rate limit and authz run before any body is read, so a malformed body can
//! never earn a 400 ahead of a 401, 403 or 429; they write their own answers.

pub mod authz;
pub mod identify;
pub mod limiter;
pub mod metrics;
pub mod rate_limit;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use self::authz::Decision;
use self::identify::{Caller, Identification};
use self::metrics::{Observation, Observed};
use crate::state::AppState;

/// How a route is guarded, declared next to the route.
#[derive(Debug)]
pub struct RouteSpec {
    /// Route name: the key of its rule codes in `[authz.rules]`.
    pub name: &'static str,
    /// Rate limit, if the route has one.
    pub rate_limit: Option<RateLimitSpec>,
    /// Business activity counted for this route (the allow-list), if any.
    pub activity: Option<&'static str>,
}

/// A route's rate limit: requests per subject per minute.
#[derive(Debug)]
pub struct RateLimitSpec {
    /// Bucket, also the key in `[rate_limit]` that overrides the default.
    pub bucket: &'static str,
    /// The limit when `rate_limit.<bucket>` is absent.
    pub default_limit: u32,
    /// What the caller is told when over the limit.
    pub message: &'static str,
}

/// Wraps a route in its layers, as one service that runs them in the fixed
/// order (one service in the chain rather than four keeps the per-request
/// cost of the stack small).
pub fn guard(
    state: &AppState,
    spec: &'static RouteSpec,
    route: MethodRouter<AppState>,
) -> MethodRouter<AppState> {
    route.route_layer(GuardLayer {
        state: state.clone(),
        spec,
    })
}

/// Wraps a route that authenticates by itself (a signed callback) in the
/// API metrics alone: no identity, authorization or rate limit applies.
pub fn observed(
    state: &AppState,
    spec: &'static RouteSpec,
    route: MethodRouter<AppState>,
) -> MethodRouter<AppState> {
    route.route_layer(ObserveLayer {
        state: state.clone(),
        spec,
    })
}

/// Makes [`Observe`]s for one route.
#[derive(Clone)]
struct ObserveLayer {
    state: AppState,
    spec: &'static RouteSpec,
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            state: self.state.clone(),
            spec: self.spec,
            inner,
        }
    }
}

/// A route observed by the API metrics, called as it is.
#[derive(Clone)]
struct Observe<S> {
    state: AppState,
    spec: &'static RouteSpec,
    inner: S,
}

impl<S> Service<Request> for Observe<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Observed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let observation = Observation::start(&self.state, self.spec, &request, Instant::now());
        Observed::new(observation, self.inner.call(request))
    }
}

/// Makes [`Guard`]s for one route.
#[derive(Clone)]
struct GuardLayer {
    state: AppState,
    spec: &'static RouteSpec,
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            state: self.state.clone(),
            spec: self.spec,
            inner,
        }
    }
}

/// The layers of one route.
///
/// A hand-written service rather than `axum::middleware::from_fn`: with the
/// static authz provider every check is synchronous, so the route can be
/// called directly and its future wrapped, instead of from_fn's clone of the
/// boxed inner service, boxed future and large async state machine per
/// request, which profiling put at about a quarter of the guard's CPU time on
/// a trivial route. Only the HTTP provider, which waits on the network
/// anyway, takes a boxed async path.
#[derive(Clone)]
struct Guard<S> {
    state: AppState,
    spec: &'static RouteSpec,
    inner: S,
}

impl<S> Service<Request> for Guard<S>
where
    S: Service<Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = GuardFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Readiness is the route's; a refused request then leaves it unused,
        // as tower allows.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // One snapshot for the three checks: they see the same configuration.
        let settings = self.state.config.load();
        let arrived = Instant::now();
        match identify::resolve(&self.state, &settings, &request) {
            Identification::Now(caller) => self.admit(settings, caller, request, arrived),
            Identification::AfterKeyRefetch(refetch) => {
                // As for the HTTP authz provider below: the instance made
                // ready goes with the request.
                let ready = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, ready);
                let mut guard = Self {
                    state: self.state.clone(),
                    spec: self.spec,
                    inner,
                };
                GuardFuture::boxed(async move {
                    refetch.run().await;
                    let settings = guard.state.config.load();
                    let caller = identify::resolve_after_refetch(&guard.state, &settings, &request);
                    guard.admit(settings, caller, request, arrived).await
                })
            }
        }
    }
}

impl<S> Guard<S>
where
    S: Service<Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    /// The rate limit and authz of a resolved caller, then the route.
    fn admit(
        &mut self,
        settings: arc_swap::Guard<std::sync::Arc<crate::config::Settings>>,
        caller: Caller,
        mut request: Request,
        arrived: Instant,
    ) -> GuardFuture<S::Future, S::Error> {
        let (state, spec) = (&self.state, self.spec);
        if let Some(refused) = rate_limit::check(state, &settings, spec, &caller, arrived) {
            return GuardFuture::answered(refused);
        }
        match authz::check(state, settings, spec, caller.into_identity()) {
            Decision::Now(Ok(authorized)) => {
                request.extensions_mut().insert(authorized);
                let observation = Observation::start(state, spec, &request, arrived);
                GuardFuture::observed(observation, self.inner.call(request))
            }
            Decision::Now(Err(refused)) => GuardFuture::answered(refused.into_response()),
            Decision::Later(decision) => {
                // The route is called after the provider answers, so the
                // instance made ready by `poll_ready` goes with the request
                // and a clone, polled before its own use, stays here.
                let ready = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, ready);
                let state = state.clone();
                GuardFuture::boxed(async move {
                    match decision.await {
                        Ok(authorized) => {
                            request.extensions_mut().insert(authorized);
                            let observation = Observation::start(&state, spec, &request, arrived);
                            Observed::new(observation, inner.call(request)).await
                        }
                        Err(refused) => Ok(refused.into_response()),
                    }
                })
            }
        }
    }
}

type BoxedResponse<E> = Pin<Box<dyn Future<Output = Result<Response, E>> + Send>>;

pin_project! {
    /// The answer of a [`Guard`]: a refusal, the observed route, or the
    /// boxed path through the HTTP authz provider.
    #[project = GuardProj]
    enum GuardFuture<F, E> {
        Answered { response: Option<Response> },
        Observed { #[pin] observed: Observed<F> },
        Boxed { future: BoxedResponse<E> },
    }
}

impl<F, E> GuardFuture<F, E> {
    fn answered(response: Response) -> Self {
        Self::Answered {
            response: Some(response),
        }
    }

    fn observed(observation: Observation, future: F) -> Self {
        Self::Observed {
            observed: Observed::new(observation, future),
        }
    }

    fn boxed(future: impl Future<Output = Result<Response, E>> + Send + 'static) -> Self {
        Self::Boxed {
            future: Box::pin(future),
        }
    }
}

impl<F, E> Future for GuardFuture<F, E>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            GuardProj::Answered { response } => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
            GuardProj::Observed { observed } => observed.poll(cx),
            GuardProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}
