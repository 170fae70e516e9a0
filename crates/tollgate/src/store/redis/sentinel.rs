//! A Redis master named by a set of Sentinels, followed across failovers.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::Mutex as AsyncMutex;

use crate::error::{Error, ErrorKind, Result};

/// The master that a set of Sentinels names. It asks them again every
/// second and after any error that hints at a failover (unreachable,
/// READONLY, MASTERDOWN), and moves its connection to the new master;
/// `generation` counts the moves (subscriptions follow it).
pub(super) struct SentinelMaster {
    pub(super) sentinels: Vec<redis::ConnectionInfo>,
    pub(super) name: String,
    pub(super) template: redis::ConnectionInfo,
    pub(super) config: ConnectionManagerConfig,
    /// The response timeout `config` carries.
    pub(super) response_timeout: Duration,
    /// A refresh is queued or running (failing calls ask for one each).
    pub(super) refresh_pending: std::sync::atomic::AtomicBool,
    pub(super) current: std::sync::Mutex<Option<(redis::ConnectionAddr, ConnectionManager)>>,
    pub(super) refreshing: AsyncMutex<()>,
    pub(super) generation: tokio::sync::watch::Sender<u64>,
}

impl SentinelMaster {
    /// Finds the master now and keeps following it while the handle lives.
    pub(super) async fn start(
        sentinels: Vec<redis::ConnectionInfo>,
        name: String,
        template: redis::ConnectionInfo,
        config: ConnectionManagerConfig,
        response_timeout: Duration,
    ) -> Result<Arc<SentinelMaster>> {
        let master = Arc::new(SentinelMaster {
            sentinels,
            name,
            template,
            config,
            response_timeout,
            refresh_pending: std::sync::atomic::AtomicBool::new(false),
            current: std::sync::Mutex::new(None),
            refreshing: AsyncMutex::new(()),
            generation: tokio::sync::watch::Sender::new(0),
        });
        master.refresh().await?;
        let weak = Arc::downgrade(&master);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let Some(master) = weak.upgrade() else { return };
                let _ = master.refresh().await;
            }
        });
        Ok(master)
    }

    /// Asks the Sentinels in turn for the master's address.
    pub(super) async fn ask(&self) -> Result<redis::ConnectionAddr> {
        let mut last = None;
        for sentinel in &self.sentinels {
            let answer = async {
                let client = redis::Client::open(sentinel.clone())?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.name)
                    .query_async(&mut conn)
                    .await?;
                Ok::<_, redis::RedisError>(addr)
            };
            match tokio::time::timeout(Duration::from_secs(2), answer).await {
                Ok(Ok(Some((host, port)))) => return Ok(redis::ConnectionAddr::Tcp(host, port)),
                Ok(Ok(None)) => last = Some(format!("no Sentinel knows a master named {:?}", self.name)),
                Ok(Err(e)) => last = Some(format!("Sentinel {}: {e}", sentinel.addr())),
                Err(_) => last = Some(format!("Sentinel {} did not answer", sentinel.addr())),
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            last.unwrap_or_else(|| "no Sentinel answered".to_owned()),
        ))
    }

    /// Moves to the master the Sentinels name, if it changed.
    pub(super) async fn refresh(&self) -> Result<()> {
        let _one = self.refreshing.lock().await;
        let addr = self.ask().await?;
        if self.current().is_some_and(|(a, _)| a == addr) {
            return Ok(());
        }
        let client = redis::Client::open(self.template.clone().set_addr(addr.clone()))?;
        let mut conn = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        // Not moved to a master older than supported (the first one: the
        // store is refused; a later one: calls fail as unreachable, with
        // this error's message, until the Sentinels name another).
        let shown = format!("the master {:?} at {addr}", self.name);
        if let Some(info) = super::version::info(&mut conn, &shown).await? {
            super::version::check_version(&info, &shown)?;
        }
        let moved = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace((addr, conn))
            .is_some();
        if moved {
            self.generation.send_modify(|g| *g += 1);
        }
        Ok(())
    }

    /// The current master's address.
    pub(super) fn addr(&self) -> Option<redis::ConnectionAddr> {
        self.current().map(|(a, _)| a)
    }

    /// The master's address and the connection to it, if one is known.
    pub(super) fn current(&self) -> Option<(redis::ConnectionAddr, ConnectionManager)> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(super) async fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        let not_connected =
            |why: String| redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, why));
        if self.current().is_none() {
            self.refresh().await.map_err(|e| not_connected(e.to_string()))?;
        }
        self.current()
            .map(|(_, c)| c)
            .ok_or_else(|| not_connected("no master known yet".to_owned()))
    }

    /// After an error that hints at a failover, asks the Sentinels again
    /// (in the background; this call still fails, and the next one goes to
    /// the new master).
    pub(super) fn check_after<T>(self: &Arc<Self>, r: &redis::RedisResult<T>) {
        let Err(e) = r else { return };
        let hint = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || matches!(
                e.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::ReadOnly | redis::ServerErrorKind::MasterDown
                )
            );
        // One refresh at a time, however many calls fail meanwhile.
        if hint
            && !self
                .refresh_pending
                .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let master = self.clone();
            tokio::spawn(async move {
                let _ = master.refresh().await;
                master
                    .refresh_pending
                    .store(false, std::sync::atomic::Ordering::Release);
            });
        }
    }
}
