//! API metrics for every guarded route, and business-activity metrics for the
//! routes on the allow-list. Both only read what is already parsed (route
//! template, method, status) and never the body.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use pin_project_lite::pin_project;

use super::RouteSpec;
use crate::observer::{Observer, observe};
use crate::state::AppState;

/// API metrics (latency and status per route template, never the raw path,
/// which would make the series unbounded) around business-activity metrics
/// ("received" on arrival, "succeeded" on a 2xx answer, for routes that
/// declare an activity) of one request.
pub struct Observation {
    observer: Arc<dyn Observer>,
    activity: Option<&'static str>,
    started: Instant,
    route: Option<MatchedPath>,
    method: Method,
}

impl Observation {
    /// Starts observing `request`, which `arrived` then: counts it as received.
    pub fn start(state: &AppState, spec: &RouteSpec, request: &Request, arrived: Instant) -> Self {
        let observation = Self {
            observer: state.observer.clone(),
            activity: spec.activity,
            started: arrived,
            route: request.extensions().get::<MatchedPath>().cloned(),
            method: request.method().clone(),
        };
        if let Some(activity) = observation.activity {
            observe("activity_received", || {
                observation.observer.activity_received(activity)
            });
        }
        observation
    }

    /// Records the answer: the activity's success, then the request's
    /// latency and status.
    pub fn finish(self, status: StatusCode) {
        if let Some(activity) = self.activity
            && status.is_success()
        {
            observe("activity_succeeded", || {
                self.observer.activity_succeeded(activity)
            });
        }
        let seconds = self.started.elapsed().as_secs_f64();
        observe("api_request", || {
            self.observer.api_request(
                self.route.as_ref().map_or("", MatchedPath::as_str),
                self.method.as_str(),
                status.as_u16(),
                seconds,
            )
        });
    }
}

pin_project! {
    /// The rest of a request, finishing its [`Observation`] when it answers.
    pub struct Observed<F> {
        #[pin]
        future: F,
        observation: Option<Observation>,
    }
}

impl<F> Observed<F> {
    /// Observes `future`, the rest of the request `observation` started on.
    pub fn new(observation: Observation, future: F) -> Self {
        Self {
            future,
            observation: Some(observation),
        }
    }
}

impl<F, E> Future for Observed<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.future.poll(cx));
        if let (Ok(response), Some(observation)) = (&result, this.observation.take()) {
            observation.finish(response.status());
        }
        Poll::Ready(result)
    }
}
