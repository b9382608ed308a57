//! Just enough WebDriver to drive headless Chromium through `chromedriver`
//! (Debian's `chromium` and `chromium-driver` packages): sessions, pages,
//! elements, clicks, dialogs, scripts and screenshots, over plain HTTP.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long anything the browser does may take.
const PATIENCE: Duration = Duration::from_secs(30);

/// A browser session; the driver process ends with it.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium session, or says how
    /// to install them.
    pub fn start() -> Browser {
        for path in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: the dashboard test drives Debian's Chromium; install it with `apt-get install -y chromium chromium-driver` (.ci/run does)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
        };
        let deadline = Instant::now() + PATIENCE;
        while browser.call("GET", "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1000"]
            }
        }}});
        let session = browser
            .call("POST", "/session", Some(capabilities))
            .expect("a browser session");
        browser.session = session["sessionId"].as_str().unwrap().to_owned();
        browser
    }

    /// Opens `url`.
    pub fn go(&self, url: &str) {
        self.command("POST", "url", json!({ "url": url }));
    }

    /// The first element matching `css`, once one does.
    pub fn find(&self, css: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(found) = self.call(
                "POST",
                &format!("/session/{}/element", self.session),
                Some(json!({"using": "css selector", "value": css})),
            ) && let Some(id) = found
                .as_object()
                .and_then(|o| o.values().next())
                .and_then(Value::as_str)
            {
                return id.to_owned();
            }
            assert!(Instant::now() < deadline, "no element {css:?} appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `script` (a JavaScript expression) is true.
    pub fn wait_for(&self, what: &str, script: &str) {
        let deadline = Instant::now() + PATIENCE;
        while self.run(&format!("return !!({script});")) != Value::Bool(true) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Finds the element `selector` and clicks it, finding it again when
    /// the page drew it anew in between (a redraw replaces elements).
    pub fn click_on(&self, selector: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let id = self.find(selector);
            let path = format!("/session/{}/element/{id}/click", self.session);
            match self.call("POST", &path, Some(json!({}))) {
                Ok(_) => return,
                Err(e) if e.contains("stale element") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("click on {selector}: {e}"),
            }
        }
    }

    /// Clicks the element `id`.
    pub fn click(&self, id: &str) {
        self.command("POST", &format!("element/{id}/click"), json!({}));
    }

    /// The visible text of the element `id`.
    pub fn text(&self, id: &str) -> String {
        self.command("GET", &format!("element/{id}/text"), Value::Null)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Whether the element `id` is enabled (a button one can press).
    pub fn enabled(&self, id: &str) -> bool {
        self.command("GET", &format!("element/{id}/enabled"), Value::Null) == Value::Bool(true)
    }

    /// Accepts the `confirm()` dialog, once it is open.
    pub fn accept_dialog(&self) {
        let deadline = Instant::now() + PATIENCE;
        while self
            .call(
                "POST",
                &format!("/session/{}/alert/accept", self.session),
                Some(json!({})),
            )
            .is_err()
        {
            assert!(Instant::now() < deadline, "no dialog opened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `script` in the page; its value.
    pub fn run(&self, script: &str) -> Value {
        self.command(
            "POST",
            "execute/sync",
            json!({"script": script, "args": []}),
        )
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        let encoded = self.command("GET", "screenshot", Value::Null);
        base64(encoded.as_str().unwrap_or_default())
    }

    fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let body = (method == "POST").then_some(body);
        self.call(method, &format!("/session/{}/{path}", self.session), body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// One WebDriver call; its `value`, or the driver's error.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(PATIENCE))
            .map_err(|e| e.to_string())?;
        let (head, body) = read_response(&mut stream)?;
        let answer: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        let value = answer["value"].clone();
        if head.starts_with("http/1.1 200") {
            Ok(value)
        } else {
            Err(value.to_string())
        }
    }
}

/// Reads one response: its head and its body. chromedriver answers
/// `Connection: close` and keeps the socket open, so the body is read by
/// its length (or its chunks), never to the end of the stream.
fn read_response(stream: &mut TcpStream) -> Result<(String, String), String> {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    let complete = |bytes: &[u8]| -> Option<(String, String)> {
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
        let body = &bytes[end + 4..];
        if head.contains("transfer-encoding: chunked") || head.contains("transfer-encoding:chunked")
        {
            let body = String::from_utf8_lossy(body);
            return body
                .contains("\r\n0\r\n\r\n")
                .then(|| (head.clone(), unchunk(&body)));
        }
        let length = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0);
        (body.len() >= length).then(|| {
            (
                head.clone(),
                String::from_utf8_lossy(&body[..length]).into_owned(),
            )
        })
    };
    loop {
        if let Some(done) = complete(&bytes) {
            return Ok(done);
        }
        let n = stream.read(&mut buffer).map_err(|e| e.to_string())?;
        if n == 0 {
            return complete(&bytes)
                .ok_or_else(|| "the driver closed the connection mid-answer".to_owned());
        }
        bytes.extend_from_slice(&buffer[..n]);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn unchunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// Standard base64, decoded.
fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let digits: Vec<u8> = text.bytes().filter_map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().fold(0u32, |n, d| (n << 6) | u32::from(*d)) << (6 * (4 - chunk.len()));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    out
}
