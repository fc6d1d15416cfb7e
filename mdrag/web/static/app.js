// mdrag's page: a client of the `mdrag serve` WebSocket protocol (docs/protocol.md), nothing more.
// The server answers the requests of one connection one at a time, in order, so each request sent
// queues a handler, and every message goes to the oldest handler still waiting.
import { renderMarkdown } from "./markdown.js";

const $ = (id) => document.getElementById(id);
const form = $("ask");
const question = $("question");
const sendButton = $("send");
const stopButton = $("stop");
const searchOnly = $("search-only");
const log = $("log");
const stateLine = $("state");
const tokenForm = $("token-form");
const tokenInput = $("token");
const TOKEN = "mdrag-token"; // kept in sessionStorage: gone when the tab closes

let ws = null; // the open connection, or null
let pending = []; // handlers of the requests sent, oldest first
let answering = null; // the handler of the question being answered
let state = ""; // the server's last state: loading | ready | empty
let poll = 0;
let turns = 0;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function setState(name, text) {
  stateLine.dataset.state = name;
  stateLine.textContent = text;
}

// "indexing: 120 of 1089 files" while the server updates its index, or "" when it does not
function indexing(msg) {
  const p = msg.indexing;
  if (!p) return "";
  return p.files_total === null ? "indexing: scanning the folders" : `indexing: ${p.files_done} of ${p.files_total} files`;
}

function showStatus(msg) {
  state = msg.state;
  const doing = indexing(msg);
  if (msg.state === "ready") {
    const ready = `ready: ${msg.files} files, ${msg.chunks} chunks`;
    setState("ready", doing ? `${ready} (${doing})` : ready);
  } else if (msg.state === "loading") setState("loading", doing ? `loading the index: ${doing}…` : "loading the index…");
  else setState("empty", "empty: nothing is indexed (start the server with folders: mdrag serve DIR)");
  clearTimeout(poll);
  poll = setTimeout(pollStatus, state === "loading" || doing ? 1000 : 10000);
}

function pollStatus() {
  if (ws?.readyState !== WebSocket.OPEN) return;
  if (pending.length) poll = setTimeout(pollStatus, 1000);
  else send({ type: "status" }, statusHandler());
}

function statusHandler() {
  return {
    on(msg) {
      if (msg.type === "status") showStatus(msg);
      return msg.type === "status" || msg.type === "error";
    },
    fail() {},
  };
}

function send(msg, handler) {
  pending.push(handler);
  ws.send(JSON.stringify(msg));
}

function dispatch(msg) {
  if (pending.length && pending[0].on(msg)) pending.shift();
  updateControls();
}

function dropPending(reason) {
  const dropped = pending;
  pending = [];
  for (const h of dropped) h.fail(reason);
}

function updateControls() {
  const open = ws?.readyState === WebSocket.OPEN;
  sendButton.disabled = !open || answering !== null;
  stopButton.hidden = answering === null;
  sendButton.textContent = searchOnly.checked ? "Search" : "Ask";
}

function connect() {
  const token = sessionStorage.getItem(TOKEN);
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const sock = new WebSocket(`${scheme}://${location.host}/${token ? `?token=${encodeURIComponent(token)}` : ""}`);
  let opened = false;
  ws = sock;
  pending = [statusHandler()]; // the server says its state first
  setState("connecting", "connecting…");
  sock.onopen = () => {
    opened = true;
    tokenForm.hidden = true;
    updateControls();
  };
  sock.onmessage = (ev) => {
    if (ws === sock) dispatch(JSON.parse(ev.data));
  };
  sock.onclose = () => {
    if (ws !== sock) return; // closed on purpose (Stop)
    ws = null;
    clearTimeout(poll);
    dropPending("the connection to the server was lost; ask again once it is back");
    updateControls();
    closed(opened, token);
  };
}

async function closed(opened, token) {
  // A browser does not tell why a handshake failed: when this page's server answers plain HTTP
  // but refused the WebSocket, it wants a token (or this address is not an allowed origin).
  let up = false;
  if (!opened) {
    try {
      up = (await fetch("/", { method: "HEAD", cache: "no-store" })).ok;
    } catch {
      up = false;
    }
  }
  if (up) {
    setState("token", token ? "the server refused the token: enter it again" : "this server needs its token (server.token)");
    tokenForm.hidden = false;
    tokenInput.focus();
  } else {
    setState("offline", "not connected: is `mdrag serve` running? retrying…");
    setTimeout(connect, 2000);
  }
}

// -- the conversation ----------------------------------------------------------
function newTurn(text, kind) {
  const id = `t${++turns}`;
  const article = el("article", `turn ${kind}`);
  article.id = id;
  const body = el("div", "body");
  article.append(el("p", "question", text), body);
  log.append(article);
  article.scrollIntoView({ block: "end" });
  return { id, article, body, question: text };
}

function end(turn) {
  turn.article.classList.remove("streaming");
  turn.article.dataset.done = ""; // the turn has its outcome: answer, error, or stop
}

function note(turn, cls, text) {
  turn.article.querySelector(":scope > .note")?.remove();
  turn.article.append(el("p", `note ${cls}`, text));
}

function cite(turn) {
  return (n) => {
    const a = el("a", "cite", `[${n}]`);
    a.href = `#${turn.id}-src-${n}`;
    a.dataset.n = String(n);
    return a;
  };
}

function ask(text) {
  const turn = newTurn(text, "answer");
  const handler = {
    text: "",
    started: false,
    on(msg) {
      switch (msg.type) {
        case "stream_start":
          this.started = true;
          performance.mark(`mdrag:stream_start:${turn.id}`);
          turn.article.classList.add("streaming");
          return false;
        case "stream_chunk":
          this.text += msg.chunk;
          turn.body.replaceChildren(renderMarkdown(this.text, { cite: cite(turn) }));
          if (!this.shown) performance.mark(`mdrag:first_text:${turn.id}`);
          this.shown = true;
          return false;
        case "stream_end":
        case "answer":
          finish(turn, msg.type === "answer" ? msg.answer : this.text, msg.sources || []);
          return true;
        case "error":
          end(turn);
          note(turn, "error", `Error: ${msg.message}`);
          answering = null;
          return true;
        case "status": // not ready: the index is loading; ask again in a second
          showStatus(msg);
          note(turn, "wait", "The index is still loading; asking again shortly…");
          setTimeout(() => {
            if (answering === handler && ws?.readyState === WebSocket.OPEN) send({ type: "query", question: text }, handler);
          }, 1000);
          return true;
        default:
          return false; // a message this page does not know: ignored
      }
    },
    fail(reason) {
      end(turn);
      if (reason === "stopped") note(turn, "stopped", "Stopped.");
      else note(turn, "error", `Error: ${reason}`);
      if (answering === handler) answering = null;
    },
  };
  answering = handler;
  send({ type: "query", question: text }, handler);
}

function finish(turn, text, sources) {
  answering = null;
  end(turn);
  turn.article.querySelector(":scope > .note")?.remove();
  turn.body.replaceChildren(renderMarkdown(text, { cite: cite(turn) }));
  if (!sources.length) {
    turn.article.classList.add("no-info");
    turn.body.prepend(el("p", "label", "No relevant information"));
    return;
  }
  // [n] is sources[n-1]; a path listed twice is shown once, under its first number
  const list = el("ol", "sources");
  const prefix = commonDir(sources);
  const first = new Map();
  sources.forEach((path, k) => {
    const n = k + 1;
    if (first.has(path)) {
      turn.body.querySelectorAll(`a.cite[data-n="${n}"]`).forEach((a) => {
        a.href = `#${turn.id}-src-${first.get(path)}`;
      });
      return;
    }
    first.set(path, n);
    list.append(sourceItem(turn, n, path, path.slice(prefix.length) || path));
  });
  turn.article.append(list);
  turn.body.addEventListener("click", (ev) => {
    const a = ev.target.closest("a.cite");
    const target = a && document.getElementById(a.hash.slice(1));
    if (!target) return;
    ev.preventDefault();
    const details = target.querySelector("details");
    details.open = true;
    target.scrollIntoView({ block: "nearest" });
  });
}

function commonDir(paths) {
  if (paths.length < 2) return paths[0]?.slice(0, paths[0].lastIndexOf("/") + 1) ?? "";
  let prefix = paths[0].slice(0, paths[0].lastIndexOf("/") + 1);
  while (prefix && !paths.every((p) => p.startsWith(prefix))) prefix = prefix.slice(0, prefix.lastIndexOf("/", prefix.length - 2) + 1);
  return prefix;
}

function sourceItem(turn, n, path, label) {
  const li = el("li");
  li.id = `${turn.id}-src-${n}`;
  const details = el("details");
  const summary = el("summary");
  summary.append(el("span", "num", `[${n}]`), " ", el("span", "path", label));
  summary.title = path;
  const box = el("div", "passages");
  details.append(summary, box);
  details.addEventListener("toggle", () => {
    if (details.open && !box.childElementCount) loadPassages(turn.question, path, box);
  });
  li.append(details);
  return li;
}

function loadPassages(query, path, box) {
  if (ws?.readyState !== WebSocket.OPEN) {
    box.append(el("p", "note error", "Not connected: close and open the source again once the page is connected."));
    return;
  }
  box.append(el("p", "note", "loading…"));
  const retry = (text) => box.replaceChildren(el("p", "note error", `${text} (close and open the source again)`));
  send(
    { type: "search", query, k: 3, threshold: 0, collapse: "none", filters: { path_prefix: path } },
    {
      on(msg) {
        if (msg.type === "search_results") {
          const own = msg.results.filter((r) => r.path === path);
          box.replaceChildren(...(own.length ? own.map(passage) : [el("p", "note", "This file has no passage any more (changed or removed).")]));
        } else if (msg.type === "error") retry(`Error: ${msg.message}`);
        else if (msg.type === "status") {
          showStatus(msg);
          retry("The index is loading");
        } else return false;
        return true;
      },
      fail: retry,
    },
  );
}

function passage(r) {
  const div = el("div", "passage");
  const where = r.page ? `page ${r.page}` : r.line_start ? `lines ${r.line_start}–${r.line_end}` : "";
  const head = el("p", "where");
  head.append(el("span", "file", r.rel_path || r.path));
  if (r.heading) head.append(" › ", el("span", "heading", r.heading));
  if (where) head.append(" · ", el("span", "lines", where));
  if (typeof r.score === "number") head.append(" · ", el("span", "score", `score ${r.score.toFixed(2)}`));
  const text = el("div", "text");
  text.append(renderMarkdown(r.text));
  div.append(head, text);
  return div;
}

function search(text) {
  const turn = newTurn(text, "search");
  turn.body.append(el("p", "note", "searching…"));
  const show = (node) => {
    turn.body.replaceChildren(node);
    end(turn);
  };
  send(
    { type: "search", query: text },
    {
      on(msg) {
        if (msg.type === "search_results") {
          if (!msg.results.length) show(el("p", "label", "No relevant information: no passage matches."));
          else {
            const ol = el("ol", "results");
            msg.results.forEach((r) => ol.appendChild(el("li")).append(passage(r)));
            show(ol);
          }
        } else if (msg.type === "error") show(el("p", "note error", `Error: ${msg.message}`));
        else if (msg.type === "status") {
          showStatus(msg);
          show(el("p", "note error", "The index is still loading: search again shortly."));
        } else return false;
        return true;
      },
      fail: (reason) => show(el("p", "note error", `Error: ${reason}`)),
    },
  );
}

// -- controls --------------------------------------------------------------------
form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = question.value.trim();
  if (!text || ws?.readyState !== WebSocket.OPEN || answering) return;
  question.value = "";
  if (searchOnly.checked) search(text);
  else ask(text);
  updateControls();
});

question.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    form.requestSubmit();
  }
});

// Stop: closing the connection makes the server cancel the answer and its LLM request
// (docs/protocol.md); a new connection takes over at once.
stopButton.addEventListener("click", () => {
  if (!answering || !ws) return;
  const sock = ws;
  ws = null;
  sock.close();
  dropPending("stopped");
  answering = null;
  connect();
  updateControls();
});

searchOnly.addEventListener("change", updateControls);

tokenForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN, tokenInput.value.trim());
  tokenInput.value = "";
  connect();
});

connect();
updateControls();
question.focus();
