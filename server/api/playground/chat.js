// gramserve playground: the conversation: the request built from the controls, the streamed
// answer (content, reasoning, tool calls, stats, errors) and tool results sent back.
import { $, el, pretty, parseJSON } from "./dom.js";
import { api, failure, errorBox } from "./api.js";
import { sseData } from "./sse.js";
import { validationBox } from "./report.js";

export const state = { messages: [], controller: null, busy: false };

export function mode() { return document.querySelector('input[name="mode"]:checked').value; }

export function readSchema() {
  const p = parseJSON($("schema-text").value);
  if (!p.ok || !p.value || typeof p.value !== "object" || Array.isArray(p.value)) {
    throw new Error(`The schema box must hold a JSON object${p.ok ? "" : ` (${p.error})`}.`);
  }
  return p.value;
}

export function readTools() {
  const p = parseJSON($("tools-text").value);
  if (!p.ok || !Array.isArray(p.value)) {
    throw new Error(`The tools box must hold a JSON list of tools${p.ok ? "" : ` (${p.error})`}.`);
  }
  return p.value;
}

export function toolNames() {
  try {
    return readTools().map((t) => t && t.function && t.function.name).filter((n) => typeof n === "string");
  } catch (e) { return []; }
}

function toolChoiceValue() {
  const v = $("tool-choice").value;
  return v.startsWith("function:") ? { type: "function", function: { name: v.slice(9) } } : v;
}

// ------------------------------------------------------------------ conversation rendering

function addUserCard(text, label) {
  const card = el("article", { class: "turn user" }, el("h3", { class: "who", text: label || "You" }), el("div", { class: "content", text }));
  $("log").append(card);
  return card;
}

function scrollLog() {
  const log = $("log");
  log.scrollTop = log.scrollHeight;
}

// Builds the request from the controls; throws an Error with a message the user can act on.
function buildRequest() {
  const body = {
    model: $("model").value || undefined,
    messages: [],
    stream: true,
    stream_options: { include_usage: true },
  };
  const sys = $("system").value.trim();
  if (sys) body.messages.push({ role: "system", content: sys });
  body.messages.push(...state.messages);
  const t = parseFloat($("temperature").value);
  if (!Number.isNaN(t)) body.temperature = t;
  const mt = parseInt($("max-tokens").value, 10);
  if (!Number.isNaN(mt)) body.max_tokens = mt;
  const m = mode();
  const ctx = { mode: m };
  if (m === "json") {
    ctx.schema = readSchema();
    body.response_format = { type: "json_schema",
      json_schema: { name: "playground", schema: ctx.schema, strict: $("schema-strict").checked } };
  } else if (m === "tools") {
    ctx.tools = readTools();
    body.tools = ctx.tools;
    body.tool_choice = toolChoiceValue();
    if (!$("parallel-calls").checked) body.parallel_tool_calls = false;
  }
  return { body, ctx };
}

// Sends the conversation plus `added` messages; when no answer comes back (an error status,
// a network failure) they are taken out of the history again. Returns whether an answer came.
export async function send(added) {
  if (state.busy) return false;
  const before = state.messages.length;
  let req;
  try {
    state.messages.push(...added);
    req = buildRequest();
  } catch (e) {
    state.messages.length = before;
    $("log").append(errorBox(0, e.message, "not sent"));
    scrollLog();
    return false;
  }
  const cards = added.map((m) => (m.role === "user" ? addUserCard(m.content) : null)).filter(Boolean);
  const ok = await stream(req.body, req.ctx);
  if (!ok) {
    state.messages.length = before;
    cards.forEach((c) => c.append(el("p", { class: "small muted", text: "(not kept in the conversation: no answer)" })));
  }
  return ok;
}

// One streamed response: content, reasoning, tool calls, stats, errors.
async function stream(body, ctx) {
  const card = el("article", { class: "turn assistant", "aria-busy": "true" }, el("h3", { class: "who", text: "Assistant" }));
  const reasoningBox = el("details", { class: "reasoning", open: true, hidden: true },
    el("summary", { text: "Reasoning" }), el("pre", { class: "reasoning-text" }));
  const content = el("pre", { class: "content" + (ctx.mode === "json" ? " json-view" : "") });
  const calls = el("div", { class: "tool-calls" });
  const stats = el("div", { class: "stats", role: "status" }, "waiting for the first token…");
  card.append(reasoningBox, content, calls, stats);
  $("log").append(card);
  scrollLog();

  const turn = { content: "", reasoning: "", calls: [], finish: null, usage: null, t0: performance.now(), tFirst: null };
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  let aborted = false;
  let streamError = null;
  let connectionError = null;
  try {
    const resp = await api("/v1/chat/completions", { method: "POST", body, signal: controller.signal });
    if (!resp.ok) {
      const f = await failure(resp);
      card.append(errorBox(f.status, f.body, "POST /v1/chat/completions"));
      stats.textContent = "no answer";
      return false;
    }
    for await (const data of sseData(resp)) {
      if (data === "[DONE]") break;
      const evt = parseJSON(data);
      if (!evt.ok) continue;
      const chunk = evt.value;
      if (chunk.error) { streamError = chunk; break; }
      if (chunk.usage) turn.usage = chunk.usage;
      for (const choice of chunk.choices || []) {
        const d = choice.delta || {};
        const reasoning = d.reasoning_content ?? d.reasoning;  // "both" sends the same text twice
        const got = (typeof d.content === "string" && d.content) || reasoning || (d.tool_calls && d.tool_calls.length);
        if (got && turn.tFirst === null) turn.tFirst = performance.now();
        if (reasoning) {
          turn.reasoning += reasoning;
          reasoningBox.hidden = false;
          reasoningBox.querySelector("pre").textContent = turn.reasoning;
        }
        if (typeof d.content === "string" && d.content) {
          turn.content += d.content;
          showContent(content, turn.content, ctx);
        }
        for (const tc of d.tool_calls || []) updateCall(calls, turn, tc);
        if (choice.finish_reason) turn.finish = choice.finish_reason;
      }
      scrollLog();
    }
  } catch (e) {
    if (e.name === "AbortError") aborted = true;
    else connectionError = e;
  } finally {
    turn.tEnd = performance.now();
    state.controller = null;
    setBusy(false);
    card.removeAttribute("aria-busy");
  }
  if (connectionError && turn.tFirst === null) {
    card.append(errorBox(0, String(connectionError), "connection"));
    stats.textContent = "no answer";
    return false;
  }
  if (connectionError) card.append(errorBox(0, String(connectionError), "connection lost"));
  if (streamError) card.append(errorBox(0, streamError, "the server ended the stream with an error"));
  finish(card, content, calls, stats, turn, ctx, aborted);
  scrollLog();
  return true;
}

function showContent(node, text, ctx) {
  if (ctx.mode === "json") {
    const p = parseJSON(text);
    node.textContent = p.ok ? pretty(p.value) : text;
  } else {
    node.textContent = text;
  }
}

function updateCall(container, turn, tc) {
  const i = tc.index ?? turn.calls.length;
  let call = turn.calls[i];
  if (!call) {
    call = turn.calls[i] = { id: "", name: "", args: "" };
    call.node = el("div", { class: "tool-call" }, el("div", { class: "tool-head" },
      "call ", el("code", { class: "tool-name" }), " ", el("span", { class: "muted small tool-id" })),
      el("pre", { class: "tool-args json-view" }));
    container.append(call.node);
  }
  if (tc.id) call.id = tc.id;
  const fn = tc.function || {};
  if (fn.name) call.name += fn.name;
  if (fn.arguments) call.args += fn.arguments;
  call.node.querySelector(".tool-name").textContent = call.name;
  call.node.querySelector(".tool-id").textContent = call.id;
  const p = parseJSON(call.args);
  call.node.querySelector(".tool-args").textContent = p.ok ? pretty(p.value) : call.args;
}

function finish(card, content, calls, stats, turn, ctx, aborted) {
  const finishReason = aborted ? "stopped (you aborted it)" : turn.finish || "none (stream ended without one)";
  const parts = [el("span", {}, "finish: ", el("strong", { class: "finish-reason", text: finishReason }))];
  const u = turn.usage;
  if (u) {
    parts.push(el("span", { class: "tokens", text: `tokens: ${u.prompt_tokens} prompt + ${u.completion_tokens} completion` }));
    const r = u.completion_tokens_details && u.completion_tokens_details.reasoning_tokens;
    if (r) parts.push(el("span", { text: `${r} reasoning` }));
  } else {
    parts.push(el("span", { class: "tokens", text: aborted ? "tokens: not reported (aborted)" : "tokens: not reported" }));
  }
  if (turn.tFirst !== null) {
    parts.push(el("span", { class: "ttft", text: `TTFT ${Math.round(turn.tFirst - turn.t0)} ms` }));
    const gen = (turn.tEnd - turn.tFirst) / 1000;
    if (u && u.completion_tokens > 1 && gen > 0) {
      parts.push(el("span", { class: "tps", text: `${((u.completion_tokens - 1) / gen).toFixed(1)} tokens/s` }));
    }
  }
  parts.push(el("span", { text: `${((turn.tEnd - turn.t0) / 1000).toFixed(2)} s total` }));
  stats.replaceChildren(...parts.flatMap((p, i) => (i ? [" · ", p] : [p])));

  if (ctx.mode === "json" && !aborted && (turn.content || turn.finish)) {
    showContent(content, turn.content, ctx);
    content.after(validationBox(ctx.schema, turn.content, turn.finish, "the answer").box);
  }
  if (!turn.content) content.hidden = true;
  const done = turn.calls.filter(Boolean);
  for (const call of done) {
    const tool = (ctx.tools || []).find((t) => t && t.function && t.function.name === call.name);
    if (!tool) {
      call.node.append(el("div", { class: "validation bad", text: `✗ no tool named "${call.name}" was offered` }));
      continue;
    }
    const params = tool.function.parameters || { type: "object", properties: {} };
    call.node.append(validationBox(params, call.args, turn.finish, `arguments of ${call.name}`).box);
  }
  if (!turn.content && !done.length) return;  // nothing to keep in the conversation
  const msg = { role: "assistant", content: turn.content || null };
  if (done.length) {
    msg.tool_calls = done.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.args } }));
  }
  state.messages.push(msg);
  if (done.length && !aborted) card.append(toolAnswerForm(done));
}

// Answer each call with a tool message, then continue the conversation.
function toolAnswerForm(done) {
  const form = el("form", { class: "tool-answers" });
  form.append(el("p", { class: "small muted", text: "Answer the call(s) with a result and continue. With tool_choice " +
    "\"required\" the model must call again: pick auto to let it answer in text." }));
  const inputs = done.map((c, i) => {
    const id = `tool-result-${Date.now()}-${i}`;
    const ta = el("textarea", { id, rows: 2, class: "code", placeholder: '{"temperature_c": 21}' });
    form.append(el("div", { class: "field" }, el("label", { for: id, text: `Result of ${c.name} (${c.id})` }), ta));
    return ta;
  });
  const button = el("button", { type: "submit", text: "Send tool result and continue" });
  form.append(el("div", { class: "row" }, button));
  const submit = (ev) => {
    ev.preventDefault();
    if (state.busy) return;
    const results = done.map((c, i) => ({ role: "tool", tool_call_id: c.id, content: inputs[i].value }));
    const controls = form.querySelectorAll("textarea, button");
    controls.forEach((n) => { n.disabled = true; });
    const cards = done.map((c, i) => addUserCard(inputs[i].value || "(empty)", `Tool result · ${c.name}`));
    send(results).then((ok) => {
      if (ok) return;
      cards.forEach((c) => c.remove());
      controls.forEach((n) => { n.disabled = false; });
    });
  };
  form.addEventListener("submit", submit);
  inputs.forEach((ta) => ta.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) submit(ev);
  }));
  return form;
}

function setBusy(busy) {
  state.busy = busy;
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}
