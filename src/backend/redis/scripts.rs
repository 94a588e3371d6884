//! The Lua scripts (`*.lua` beside this file), sent by hash (`EVALSHA`) and in full only
//! when a server does not know them yet.
//!
//! acquire, renew, release, leave, fence, linger and share are each one script: each call is one round
//! trip, and connecting sends nothing but the handshake. The scripts read the server's
//! `TIME`, so all clients share one clock.

use std::time::Duration;

use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use super::conn::Conn;

/// A Lua script as sent: `common.lua` in front of its own file, and the SHA1 that
/// `build.rs` computed from the same text (hashing at run time would add to the start-up of
/// every `dlock` run; figures: benches/RESULTS.md).
pub(super) struct Lua {
    pub(super) body: &'static str,
    pub(super) sha: &'static str,
}

macro_rules! lua {
    ($file:literal, $sha:literal) => {
        Lua {
            body: concat!(include_str!("common.lua"), "\n", include_str!($file)),
            sha: env!($sha),
        }
    };
}

impl Lua {
    /// `SCRIPT LOAD`s the body, for a server that answered `NOSCRIPT`.
    async fn load(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.body);
        cmd.query_async::<String>(conn).await.map(drop)
    }
}

/// The scripts, each sent by SHA (`EVALSHA`) and only in full when the server lacks it.
pub(super) struct Scripts {
    pub(super) acquire: Lua,
    pub(super) renew: Lua,
    pub(super) release: Lua,
    pub(super) leave: Lua,
    pub(super) fence: Lua,
    pub(super) linger: Lua,
    pub(super) share: Lua,
}

/// Text and hash are both fixed at build time: one static serves every connection.
pub(super) static SCRIPTS: Scripts = Scripts {
    acquire: lua!("acquire.lua", "DLOCK_LUA_SHA_ACQUIRE"),
    renew: lua!("renew.lua", "DLOCK_LUA_SHA_RENEW"),
    release: lua!("release.lua", "DLOCK_LUA_SHA_RELEASE"),
    leave: lua!("leave.lua", "DLOCK_LUA_SHA_LEAVE"),
    fence: lua!("fence.lua", "DLOCK_LUA_SHA_FENCE"),
    linger: lua!("linger.lua", "DLOCK_LUA_SHA_LINGER"),
    share: lua!("share.lua", "DLOCK_LUA_SHA_SHARE"),
};

/// Runs `cmd`, an `EVALSHA` of `script` (see [`evalsha`]); on `NOSCRIPT` the script is
/// loaded and the call made again, once. On a Cluster the call is made again as an `EVAL`
/// of the body instead, which reaches the one master of the keys' slot and leaves the
/// script there: a replica just promoted knows no script, and `SCRIPT LOAD` goes to every
/// node, so one node down (the master it replaced) would fail it.
pub(super) async fn run_script(
    conn: &mut Conn,
    script: &Lua,
    cmd: &Cmd,
) -> redis::RedisResult<Value> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            if conn.is_cluster() {
                return as_eval(script, cmd).query_async(conn).await;
            }
            script.load(conn).await?;
            cmd.query_async(conn).await
        }
        reply => reply,
    }
}

/// `cmd`, an `EVALSHA` of `script`, as an `EVAL` of its body with the same keys and
/// arguments.
fn as_eval(script: &Lua, cmd: &Cmd) -> Cmd {
    let mut eval = Cmd::with_capacity(cmd.args_iter().len(), script.body.len() + 256);
    eval.arg("EVAL").arg(script.body);
    for arg in cmd.args_iter().skip(2) {
        if let redis::Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    eval
}

/// An `EVALSHA` of `script` on `keys`, to which the caller adds `args` arguments. Built
/// straight into one command buffer: a `ScriptInvocation` copies every key and argument
/// into a vector of its own first, a dozen allocations per call on the hot path.
pub(super) fn evalsha(script: &Lua, keys: &[&str], args: usize) -> Cmd {
    let mut cmd = Cmd::with_capacity(3 + keys.len() + args, 256);
    cmd.arg("EVALSHA").arg(script.sha).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

/// Milliseconds for a script argument; at least 1, as Redis rejects a zero expiry.
pub(super) fn millis(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_time_hashes_match_the_scripts() {
        let s = &SCRIPTS;
        for lua in [
            &s.acquire, &s.renew, &s.release, &s.leave, &s.fence, &s.linger, &s.share,
        ] {
            assert_eq!(redis::Script::new(lua.body).get_hash(), lua.sha);
        }
    }

    #[test]
    fn an_evalsha_is_made_an_eval_of_the_body() {
        let script = &SCRIPTS.renew;
        let mut cmd = evalsha(script, &["k1", "k2"], 2);
        cmd.arg("owner").arg(7);
        let eval = as_eval(script, &cmd);
        let args: Vec<Vec<u8>> = eval
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => panic!("no cursor"),
            })
            .collect();
        let want: Vec<&[u8]> = vec![
            b"EVAL",
            script.body.as_bytes(),
            b"2",
            b"k1",
            b"k2",
            b"owner",
            b"7",
        ];
        assert_eq!(args, want);
    }

    #[test]
    fn millis_are_never_zero() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 1);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
    }
}
