//! A small client of memcached's meta protocol (`mg`, `ms`, `md`, `ma`) over TCP.
//!
//! No crate speaks the meta commands, and they are a few lines of text each. Requests
//! of one call are pipelined in one write; connections are kept in a pool and reused. A
//! connection that failed or timed out is dropped, never reused: its replies could be
//! out of step with its requests.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::error::{passing_io, Error, Result};

/// Timing knobs. The defaults suit production; tests may shrink them.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Longest wait to connect.
    pub connect_timeout: Duration,
    /// Longest wait for the replies of one call: a server that accepts and never answers
    /// must not hang us.
    pub op_timeout: Duration,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            connect_timeout: Duration::from_secs(2),
            op_timeout: Duration::from_secs(3),
        }
    }
}

/// Idle connections kept for reuse.
const POOL_MAX: usize = 8;

/// One reply of the meta protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `HD flags`: done (stored, deleted, found without a value).
    Done(Flags),
    /// `VA size flags` and the value.
    Value(Flags, Vec<u8>),
    /// `NS`: not stored (an add that found the key).
    NotStored,
    /// `EX`: the CAS id did not match.
    Exists,
    /// `NF` or `EN`: no such item.
    Missing,
}

/// The flags of a reply: `c123 t5` as `[('c', "123"), ('t', "5")]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags(Vec<(u8, String)>);

impl Flags {
    /// The number after flag `f`, if the reply has it.
    pub fn num(&self, f: u8) -> Option<i64> {
        self.0
            .iter()
            .find(|(k, _)| *k == f)
            .and_then(|(_, v)| v.parse().ok())
    }

    fn parse<'a>(tokens: impl Iterator<Item = &'a str>) -> Flags {
        Flags(
            tokens
                .filter(|t| !t.is_empty())
                .map(|t| (t.as_bytes()[0], t[1..].to_string()))
                .collect(),
        )
    }
}

/// One request: its command line and, for `ms`, its value.
pub struct Request {
    bytes: Vec<u8>,
    /// The reply is several lines up to `END` (`lru_crawler metadump`).
    listing: bool,
}

impl Request {
    /// `mg KEY FLAGS`.
    pub fn get(key: &str, flags: &str) -> Request {
        Request::line(format!("mg {key} {flags}"))
    }

    /// `ms KEY LEN FLAGS` and the value.
    pub fn set(key: &str, value: &[u8], flags: &str) -> Request {
        let mut bytes = format!("ms {key} {} {flags}\r\n", value.len()).into_bytes();
        bytes.extend_from_slice(value);
        bytes.extend_from_slice(b"\r\n");
        Request {
            bytes,
            listing: false,
        }
    }

    /// `md KEY FLAGS`.
    pub fn delete(key: &str, flags: &str) -> Request {
        Request::line(format!("md {key} {flags}"))
    }

    /// `ma KEY FLAGS`.
    pub fn arith(key: &str, flags: &str) -> Request {
        Request::line(format!("ma {key} {flags}"))
    }

    /// `lru_crawler metadump hash`: one line per item, then `END`.
    pub fn dump() -> Request {
        Request {
            bytes: b"lru_crawler metadump hash\r\n".to_vec(),
            listing: true,
        }
    }

    fn line(line: String) -> Request {
        Request {
            bytes: format!("{}\r\n", line.trim_end()).into_bytes(),
            listing: false,
        }
    }
}

/// What a listing returned: its lines, or the server's refusal (`BUSY`, `ERROR`).
pub type Listing = std::result::Result<Vec<String>, String>;

struct Conn {
    stream: BufReader<TcpStream>,
}

/// A pool of connections to one server.
pub struct Client {
    addr: String,
    name: String,
    tuning: Tuning,
    idle: Mutex<Vec<Conn>>,
}

impl Client {
    /// A client of the server at `addr`, named `name` in messages. Connects lazily.
    pub fn new(addr: &str, name: &str, tuning: Tuning) -> Client {
        Client {
            addr: addr.to_string(),
            name: name.to_string(),
            tuning,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The server, as messages name it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `requests` in one write and reads their replies, in order. `what` names the
    /// operation in errors (e.g. `lock 'KEY'`).
    pub async fn call(&self, what: &str, requests: &[Request]) -> Result<Vec<Reply>> {
        let listing = requests.iter().any(|r| r.listing);
        assert!(!listing, "listings go through `list`");
        let mut conn = self.conn(what).await?;
        let limit = self.tuning.op_timeout;
        let replies = tokio::time::timeout(limit, conn.exchange(requests)).await;
        let replies = self.outcome(what, replies)?;
        self.put_back(conn).await;
        Ok(replies)
    }

    /// Sends one listing request and reads its lines up to `END`.
    pub async fn list(&self, what: &str, request: Request) -> Result<Listing> {
        let mut conn = self.conn(what).await?;
        let limit = self.tuning.op_timeout;
        let lines = tokio::time::timeout(limit, conn.listing(&request)).await;
        let lines = self.outcome(what, lines)?;
        self.put_back(conn).await;
        Ok(lines)
    }

    /// Makes one connection now (see [`Backend::ready`](crate::backend::Backend::ready)) and
    /// keeps it for the next call; `what` names the operation in errors.
    pub async fn ready(&self, what: &str) -> Result<()> {
        let conn = self.conn(what).await?;
        self.put_back(conn).await;
        Ok(())
    }

    fn outcome<T>(
        &self,
        what: &str,
        got: std::result::Result<std::io::Result<T>, tokio::time::error::Elapsed>,
    ) -> Result<T> {
        match got {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) if passing_io(e.kind()) => Err(self.lost(what, &e.to_string())),
            Ok(Err(e)) => Err(self.unavailable(what, &e.to_string())),
            Err(_) => Err(self.lost(
                what,
                &format!(
                    "timed out after {} (server not answering)",
                    humantime::format_duration(self.tuning.op_timeout)
                ),
            )),
        }
    }

    /// `memcached://host:port: WHAT: WHY`, on one line.
    pub fn unavailable(&self, what: &str, why: &str) -> Error {
        let line = format!("{}: {what}: {why}", self.name);
        Error::Unavailable(crate::terminal::escape(&line).into_owned())
    }

    /// [`Client::unavailable`] for a lost, refused or silent connection, which a new one
    /// may well not meet: [`Error::Transient`], as on every store.
    pub fn lost(&self, what: &str, why: &str) -> Error {
        match self.unavailable(what, why) {
            Error::Unavailable(line) => Error::Transient(line),
            other => other,
        }
    }

    async fn conn(&self, what: &str) -> Result<Conn> {
        if let Some(c) = self.idle.lock().await.pop() {
            return Ok(c);
        }
        let limit = self.tuning.connect_timeout;
        match tokio::time::timeout(limit, TcpStream::connect(&self.addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                Ok(Conn {
                    stream: BufReader::new(s),
                })
            }
            Ok(Err(e)) if passing_io(e.kind()) => {
                Err(self.lost(what, &format!("cannot connect: {e}")))
            }
            Ok(Err(e)) => Err(self.unavailable(what, &format!("cannot connect: {e}"))),
            Err(_) => Err(self.lost(
                what,
                &format!(
                    "cannot connect: timed out after {}",
                    humantime::format_duration(limit)
                ),
            )),
        }
    }

    async fn put_back(&self, conn: Conn) {
        let mut idle = self.idle.lock().await;
        if idle.len() < POOL_MAX {
            idle.push(conn);
        }
    }
}

fn protocol(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

impl Conn {
    async fn exchange(&mut self, requests: &[Request]) -> std::io::Result<Vec<Reply>> {
        let mut out = Vec::new();
        for r in requests {
            out.extend_from_slice(&r.bytes);
        }
        self.stream.get_mut().write_all(&out).await?;
        let mut replies = Vec::with_capacity(requests.len());
        for _ in requests {
            replies.push(self.reply().await?);
        }
        Ok(replies)
    }

    async fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Err(protocol("the server closed the connection".into()));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }

    async fn reply(&mut self) -> std::io::Result<Reply> {
        let line = self.line().await?;
        let mut tokens = line.split(' ');
        let code = tokens.next().unwrap_or("");
        Ok(match code {
            "HD" => Reply::Done(Flags::parse(tokens)),
            "NS" => Reply::NotStored,
            "EX" => Reply::Exists,
            "NF" | "EN" => Reply::Missing,
            "VA" => {
                let size: usize = tokens
                    .next()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| protocol(format!("bad reply '{line}'")))?;
                let flags = Flags::parse(tokens);
                let mut value = vec![0; size + 2];
                self.stream.read_exact(&mut value).await?;
                value.truncate(size);
                Reply::Value(flags, value)
            }
            _ => return Err(protocol(format!("unexpected reply '{line}'"))),
        })
    }

    async fn listing(&mut self, request: &Request) -> std::io::Result<Listing> {
        self.stream.get_mut().write_all(&request.bytes).await?;
        let mut lines = Vec::new();
        loop {
            let line = self.line().await?;
            match line.as_str() {
                "END" => return Ok(Ok(lines)),
                l if l.starts_with("key=") => lines.push(line),
                _ if lines.is_empty() => return Ok(Err(line)),
                _ => return Err(protocol(format!("unexpected line '{line}' in a listing"))),
            }
        }
    }
}
