//! A queue's limits as the API reads and writes them (`PUT
//! /v1/queues/{queue}/settings`, `[queues.NAME]`, `jobs limits`): the
//! body, its checks, and a rate as text.

use serde::{Deserialize, Serialize};
use tollgate::{QueueLimits, Rate};

use crate::api::error::ApiError;

/// A queue's limits as the API reads and writes them: a rate is text,
/// `N/s`, `N/min`, `N/h`, `N/d` or `N/<duration>` (`5/250ms`); a limit
/// left out or null is none.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SettingsBody {
    #[serde(default)]
    pub(crate) concurrency: Option<u32>,
    #[serde(default)]
    pub(crate) rate: Option<String>,
    #[serde(default)]
    pub(crate) group_concurrency: Option<u32>,
    #[serde(default)]
    pub(crate) group_rate: Option<String>,
}

pub(crate) fn rate(field: &str, text: Option<&str>) -> Result<Option<Rate>, ApiError> {
    text.map(|t| {
        t.parse::<Rate>()
            .map_err(|e| ApiError::bad_request(format!("{field}: {e}")))
    })
    .transpose()
}

impl SettingsBody {
    /// The limits it names, checked.
    pub(crate) fn limits(&self) -> Result<QueueLimits, ApiError> {
        Ok(QueueLimits {
            concurrency: self.concurrency,
            rate: rate("rate", self.rate.as_deref())?,
            group_concurrency: self.group_concurrency,
            group_rate: rate("group_rate", self.group_rate.as_deref())?,
        })
    }

    pub(crate) fn of(l: &QueueLimits) -> SettingsBody {
        SettingsBody {
            concurrency: l.concurrency,
            rate: l.rate.map(|r| r.to_string()),
            group_concurrency: l.group_concurrency,
            group_rate: l.group_rate.map(|r| r.to_string()),
        }
    }
}
