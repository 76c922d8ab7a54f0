// gramserve playground: plain JS, no dependencies, talks only to this server's public API
// (GET /v1/models, POST /v1/chat/completions with stream: true, POST /v1/schemas/check).
// This module wires the page's controls; the others hold the API access, SSE reading, the
// JSON-schema checker, the report view and the conversation. Loaded as a module: no build step.
import { $, el, pretty } from "./dom.js";
import { apiKey, storeKey, api, failure, errorBox } from "./api.js";
import { SCHEMA_EXAMPLES, TOOL_EXAMPLES } from "./examples.js";
import { runCheck } from "./report.js";
import { state, mode, readSchema, readTools, toolNames, send } from "./chat.js";

function refreshToolChoice() {
  const sel = $("tool-choice");
  const current = sel.value || "auto";
  const opts = ["auto", "required", "none", ...toolNames().map((n) => "function:" + n)];
  sel.replaceChildren(...opts.map((o) => el("option", { value: o, text: o.startsWith("function:") ? `named: ${o.slice(9)}` : o })));
  sel.value = opts.includes(current) ? current : "auto";
}

function showPanels() {
  const m = mode();
  $("schema-panel").hidden = m !== "json";
  $("tools-panel").hidden = m !== "tools";
}

// ------------------------------------------------------------------ models

async function loadModels() {
  const sel = $("model");
  const status = $("models-status");
  $("models-error").replaceChildren();
  status.textContent = "loading models…";
  let resp;
  try {
    resp = await api("/v1/models");
  } catch (e) {
    status.textContent = "";
    $("models-error").append(errorBox(0, String(e), "GET /v1/models"));
    return;
  }
  if (!resp.ok) {
    const f = await failure(resp);
    status.textContent = "no models";
    $("models-error").append(errorBox(f.status, f.body, "GET /v1/models"));
    if (f.status === 401) $("settings").open = true;
    return;
  }
  const data = (await resp.json()).data || [];
  const previous = sel.value;
  sel.replaceChildren(...data.map((m) => el("option", { value: m.id, text: m.max_model_len ? `${m.id} (${m.max_model_len} ctx)` : m.id })));
  if (data.some((m) => m.id === previous)) sel.value = previous;
  status.textContent = `${data.length} model${data.length === 1 ? "" : "s"}`;
}

// ------------------------------------------------------------------ wiring

function fillExamples() {
  $("schema-example").replaceChildren(el("option", { value: "", text: "— pick an example —" }),
    ...SCHEMA_EXAMPLES.map((x, i) => el("option", { value: String(i), text: x.name })));
  $("tools-example").replaceChildren(el("option", { value: "", text: "— pick an example —" }),
    ...TOOL_EXAMPLES.map((x, i) => el("option", { value: String(i), text: x.name })));
  $("schema-text").value = pretty(SCHEMA_EXAMPLES[0].schema);
  $("tools-text").value = pretty(TOOL_EXAMPLES[0].tools);
  refreshToolChoice();
}

function useExample(list, index, textarea, field) {
  const x = list[Number(index)];
  if (!x) return false;
  $(textarea).value = pretty(x[field]);
  if (!$("prompt").value.trim()) $("prompt").value = x.prompt;
  return true;
}

function checkSchemaNow() {
  let schema;
  try { schema = readSchema(); } catch (e) {
    $("schema-report").replaceChildren(errorBox(0, e.message, "not sent"));
    return;
  }
  runCheck({ schema }, [schema], $("schema-report"));
}

function checkToolsNow() {
  let tools;
  try { tools = readTools(); } catch (e) {
    $("tools-report").replaceChildren(errorBox(0, e.message, "not sent"));
    return;
  }
  runCheck({ tools }, tools.map((t) => (t && t.function && t.function.parameters) || { type: "object", properties: {} }),
    $("tools-report"));
}

function submitPrompt() {
  const text = $("prompt").value;
  if (!text.trim() || state.busy) return;
  $("prompt").value = "";
  send([{ role: "user", content: text }]).then((ok) => {
    if (!ok && !$("prompt").value) $("prompt").value = text;  // nothing lost: edit and send again
  });
}

function init() {
  $("api-key").value = apiKey();
  fillExamples();
  showPanels();
  document.querySelectorAll('input[name="mode"]').forEach((r) => r.addEventListener("change", showPanels));
  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    storeKey($("api-key").value.trim());
    loadModels();
  });
  $("forget-key").addEventListener("click", () => {
    storeKey("");
    $("api-key").value = "";
    loadModels();
  });
  $("reload-models").addEventListener("click", loadModels);
  $("schema-example").addEventListener("change", (ev) => {
    if (useExample(SCHEMA_EXAMPLES, ev.target.value, "schema-text", "schema")) checkSchemaNow();
  });
  $("tools-example").addEventListener("change", (ev) => {
    if (useExample(TOOL_EXAMPLES, ev.target.value, "tools-text", "tools")) { refreshToolChoice(); checkToolsNow(); }
  });
  $("tools-text").addEventListener("input", refreshToolChoice);
  $("check-schema").addEventListener("click", checkSchemaNow);
  $("check-tools").addEventListener("click", checkToolsNow);
  $("composer").addEventListener("submit", (ev) => { ev.preventDefault(); submitPrompt(); });
  $("prompt").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); submitPrompt(); }
  });
  $("stop").addEventListener("click", () => state.controller && state.controller.abort());
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && state.controller) state.controller.abort();
  });
  $("clear").addEventListener("click", () => {
    if (state.controller) state.controller.abort();
    state.messages = [];
    $("log").replaceChildren();
    $("prompt").focus();
  });
  loadModels();
}

document.addEventListener("DOMContentLoaded", init);
