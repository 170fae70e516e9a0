//! Rate limits in the service: limits named in the config file
//! (`[limits.NAME]`), the ad-hoc ones a check carries, and `[protect]`, the
//! layer that protects tollgate's own API with one of them.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use tollgate::{Algorithm, KeyBy, Limit, OnStoreError, Rate, RateLimitLayer, RateLimiter, Store};

use super::error::ApiError;

/// A limit as written in the config file (`[limits.NAME]`) or sent with a
/// check.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitSpec {
    /// `N/s`, `N/min`, `N/h` or `N/<duration>`.
    pub(crate) rate: String,
    /// GCRA only; default: the rate's count.
    pub(crate) burst: Option<u64>,
    /// `gcra` (default), `fixed_window` or `sliding_window`.
    pub(crate) algorithm: Option<String>,
}

impl LimitSpec {
    pub(crate) fn limit(&self) -> tollgate::Result<Limit> {
        let rate: Rate = self.rate.parse()?;
        let algorithm: Algorithm = self.algorithm.as_deref().unwrap_or("gcra").parse()?;
        Limit::new(algorithm, rate, self.burst)
    }
}

/// `[limits.NAME]` in the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitSettings {
    #[serde(flatten)]
    pub(crate) spec: LimitSpec,
    /// `error` (default: the caller gets 503), `open` or `closed`.
    pub(crate) on_store_error: Option<String>,
    /// How long a decision may wait for the store. Default 100.
    pub(crate) timeout_ms: Option<u64>,
}

/// `[protect]`: rate-limit tollgate's own /v1 API with a configured limit.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProtectSettings {
    /// A name from `[limits]`.
    pub(crate) limit: String,
    /// `ip` (default), `header:NAME` or `path`.
    pub(crate) key: Option<String>,
    /// Proxies whose `X-Forwarded-For` is believed (addresses or CIDR
    /// networks); only with `key = "ip"`.
    #[serde(default)]
    pub(crate) trusted_proxies: Vec<String>,
}

/// `[protect]`'s trusted proxies, parsed: addresses or CIDR networks.
pub(crate) fn trusted_proxies(protect: &ProtectSettings) -> Result<Vec<ipnet::IpNet>, String> {
    protect
        .trusted_proxies
        .iter()
        .map(|p| {
            p.parse::<ipnet::IpNet>()
                .or_else(|_| p.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("[protect]: trusted proxy {p:?} is not an address or network"))
        })
        .collect()
}

/// Configured limiters, plus the ad-hoc ones made for checks that carry
/// their own limit.
#[derive(Debug, Default)]
pub(crate) struct Limiters {
    configured: HashMap<String, RateLimiter>,
    ad_hoc: Mutex<HashMap<String, RateLimiter>>,
}

/// Ad-hoc limiters kept (and given their own metric series); past this,
/// checks still work but go unmetered.
const TRACKED_AD_HOC: usize = 1000;

impl Limiters {
    pub(crate) fn configure(
        store: &Store,
        settings: &HashMap<String, LimitSettings>,
    ) -> Result<Limiters, String> {
        let mut configured = HashMap::new();
        for (name, s) in settings {
            let bad = |e: tollgate::Error| format!("[limits.{name}]: {e}");
            let limit = s.spec.limit().map_err(bad)?;
            let policy: OnStoreError = s
                .on_store_error
                .as_deref()
                .unwrap_or("error")
                .parse()
                .map_err(bad)?;
            let timeout = Duration::from_millis(s.timeout_ms.unwrap_or(100));
            if timeout.is_zero() || timeout > Duration::from_secs(10) {
                return Err(format!("[limits.{name}]: timeout_ms must be 1 to 10000"));
            }
            let limiter = RateLimiter::new(store, name, limit)
                .map_err(bad)?
                .on_store_error(policy)
                .timeout(timeout);
            configured.insert(name.clone(), limiter);
        }
        Ok(Limiters {
            configured,
            ad_hoc: Mutex::default(),
        })
    }

    pub(crate) fn layer(&self, protect: &ProtectSettings) -> Result<RateLimitLayer, String> {
        let limiter = self
            .configured
            .get(&protect.limit)
            .ok_or_else(|| format!("[protect]: no limit named {:?} in [limits]", protect.limit))?;
        let key = protect.key.as_deref().unwrap_or("ip");
        if key != "ip" && !protect.trusted_proxies.is_empty() {
            return Err("[protect]: trusted_proxies only applies with key = \"ip\"".to_owned());
        }
        let key_by = match key {
            "ip" => KeyBy::ClientIp {
                trusted_proxies: trusted_proxies(protect)?,
            },
            "path" => KeyBy::Path,
            other => match other
                .strip_prefix("header:")
                .map(axum::http::HeaderName::try_from)
            {
                Some(Ok(h)) => KeyBy::Header(h),
                _ => {
                    return Err(format!("[protect]: key {other:?} is not ip, path or header:NAME"));
                }
            },
        };
        Ok(RateLimitLayer::new(limiter.clone(), key_by))
    }

    /// The limiter for `name` and the limit this check runs under.
    pub(crate) fn resolve(
        &self,
        store: &Store,
        name: &str,
        spec: Option<&LimitSpec>,
    ) -> Result<(RateLimiter, Limit), ApiError> {
        if let Some(limiter) = self.configured.get(name) {
            let configured = limiter.limit();
            if let Some(spec) = spec {
                let asked = spec.limit()?;
                if asked != configured {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "limit_conflict",
                        format!(
                            "limit {name:?} is configured on the server as {configured}; the request says {asked}"
                        ),
                    ));
                }
            }
            return Ok((limiter.clone(), configured));
        }
        let Some(spec) = spec else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "limit_not_found",
                format!(
                    "no limit {name:?} is configured on this server; send rate (and burst) with the check"
                ),
            ));
        };
        let limit = spec.limit()?;
        let mut ad_hoc = self.ad_hoc.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = ad_hoc.get(name) {
            return Ok((l.clone(), limit));
        }
        if ad_hoc.len() >= TRACKED_AD_HOC {
            let limiter = metrics::with_local_recorder(&metrics::NoopRecorder, || {
                RateLimiter::new(store, name, limit)
            })?;
            return Ok((limiter, limit));
        }
        let limiter = RateLimiter::new(store, name, limit)?;
        ad_hoc.insert(name.to_owned(), limiter.clone());
        Ok((limiter, limit))
    }

    pub(crate) fn configured(&self, name: &str) -> Option<&RateLimiter> {
        self.configured.get(name)
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct LimitInfo {
    name: String,
    algorithm: &'static str,
    rate: String,
    burst: u64,
}

impl LimitInfo {
    /// How `GET /v1/limits/{name}` shows `limiter`, named `name`.
    pub(crate) fn of(name: String, limiter: &RateLimiter) -> LimitInfo {
        let limit = limiter.limit();
        LimitInfo {
            name,
            algorithm: limit.algorithm().as_str(),
            rate: limit.rate().to_string(),
            burst: limit.burst(),
        }
    }
}

impl Limiters {
    /// How many limits are configured.
    pub(crate) fn configured_count(&self) -> usize {
        self.configured.len()
    }

    /// The configured limits as `GET /v1/limits/{name}` shows them, by
    /// name in byte order.
    pub(crate) fn configured_infos(&self) -> Vec<(String, serde_json::Value)> {
        let mut all: Vec<(String, serde_json::Value)> = self
            .configured
            .iter()
            .map(|(name, limiter)| {
                let info = LimitInfo::of(name.clone(), limiter);
                (name.clone(), serde_json::to_value(info).unwrap_or_default())
            })
            .collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }
}
