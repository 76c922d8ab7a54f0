// gramserve playground: plain JS, no dependencies, talks only to this server's public API
// (GET /v1/models, POST /v1/chat/completions with stream: true, POST /v1/schemas/check).
"use strict";

const KEY_STORE = "gramserve.playground.apiKey";
const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------ examples

const SCHEMA_EXAMPLES = [
  {
    name: "Person (exact)",
    prompt: "Describe a fictional person as JSON.",
    schema: {
      type: "object",
      properties: {
        name: { type: "string", maxLength: 40 },
        age: { type: "integer", minimum: 0, maximum: 120 },
        role: { enum: ["engineer", "artist", "teacher"] },
      },
      required: ["name", "age", "role"],
      additionalProperties: false,
    },
  },
  {
    name: "Order (one loose keyword)",
    prompt: "Write an order of two items as JSON.",
    schema: {
      type: "object",
      properties: {
        id: { type: "string", pattern: "^[A-Z]{3}-[0-9]{4}$" },
        items: { type: "array", minItems: 1, maxItems: 3, uniqueItems: true, items: { type: "string", maxLength: 20 } },
        date: { type: "string", format: "date" },
      },
      required: ["id", "items"],
      additionalProperties: false,
    },
  },
  {
    name: "Refused by the server (fractional bound on an integer)",
    prompt: "Give a small count as JSON.",
    schema: {
      type: "object",
      properties: { count: { type: "integer", maximum: 2.5 } },
      required: ["count"],
    },
  },
];

const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather for a city.",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", maxLength: 40 },
        unit: { enum: ["celsius", "fahrenheit"] },
      },
      required: ["city"],
      additionalProperties: false,
    },
  },
};
const TOOL_EXAMPLES = [
  { name: "Weather", prompt: "What is the weather in Paris?", tools: [WEATHER_TOOL] },
  {
    name: "Weather and calculator",
    prompt: "What is 17 times 23?",
    tools: [WEATHER_TOOL, {
      type: "function",
      function: {
        name: "multiply",
        description: "Multiply two integers.",
        parameters: {
          type: "object",
          properties: { a: { type: "integer" }, b: { type: "integer" } },
          required: ["a", "b"],
          additionalProperties: false,
        },
      },
    }],
  },
];

// ------------------------------------------------------------------ small DOM helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function pretty(value) { return JSON.stringify(value, null, 2); }

function parseJSON(text) {
  try { return { ok: true, value: JSON.parse(text) }; } catch (e) { return { ok: false, error: e.message }; }
}

// ------------------------------------------------------------------ API access

function apiKey() { return localStorage.getItem(KEY_STORE) || ""; }

function api(path, { method = "GET", body, signal } = {}) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const key = apiKey();
  if (key) headers.Authorization = "Bearer " + key;
  return fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
}

// A failed response as {status, body}: body is the parsed envelope when there is one.
async function failure(resp) {
  const text = await resp.text();
  const parsed = parseJSON(text);
  return { status: resp.status, body: parsed.ok ? parsed.value : text };
}

// Shows an error: the OpenAI envelope {"error": {message, type, param, code}} field by field.
function errorBox(status, body, where) {
  const err = body && typeof body === "object" && body.error && typeof body.error === "object" ? body.error : null;
  const box = el("div", { class: "error-envelope", role: "alert" });
  const head = [status ? `HTTP ${status}` : "error in the stream", where].filter(Boolean).join(" · ");
  box.append(el("div", { class: "error-head", text: head }));
  if (err) {
    box.append(el("p", { class: "error-message", text: err.message || "(no message)" }));
    const dl = el("dl", { class: "error-fields" });
    for (const f of ["type", "code", "param"]) {
      dl.append(el("dt", { text: f }), el("dd", { text: err[f] === null || err[f] === undefined ? "null" : String(err[f]) }));
    }
    box.append(dl, el("details", {}, el("summary", { text: "raw envelope" }), el("pre", { text: pretty(body) })));
  } else {
    box.append(el("p", { class: "error-message", text: typeof body === "string" ? body || "(empty body)" : pretty(body) }));
  }
  return box;
}

// Server-sent events from a fetch response: yields each event's data string.
async function* sseData(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  const boundary = /\r?\n\r?\n/;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let m;
    while ((m = boundary.exec(buf))) {
      const block = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (data) yield data;
    }
  }
}

// ------------------------------------------------------------------ JSON-schema checks in the page

// What validate() checks. Anything else in a schema is listed as "not checked here".
const CHECKED = ["type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
  "propertyNames", "minProperties", "maxProperties", "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
  "contains", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
  "multipleOf", "anyOf", "oneOf", "allOf", "not", "$ref"];
const ANNOTATIONS = new Set(["title", "description", "default", "examples", "$schema", "$id", "$defs", "definitions",
  "$comment", "deprecated", "readOnly", "writeOnly", "$anchor", "contentMediaType", "contentEncoding", "strict"]);

function canonical(v) {
  if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
  if (v && typeof v === "object") {
    return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canonical(v[k])).join(",") + "}";
  }
  return JSON.stringify(v);
}

function typeOf(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v === "number" ? (Number.isInteger(v) ? "integer" : "number") : typeof v;
}

function hasType(v, t) {
  const actual = typeOf(v);
  return t === actual || (t === "number" && actual === "integer");
}

function escPtr(s) { return String(s).replace(/~/g, "~0").replace(/\//g, "~1"); }

function resolveRef(root, ref) {
  if (ref === "#") return root;
  if (!ref.startsWith("#/")) return undefined;
  let node = root;
  for (const raw of ref.slice(2).split("/")) {
    const tok = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    if (node && typeof node === "object" && tok in node) node = node[tok];
    else return undefined;
  }
  return node;
}

// Validates value against schema; returns {errors: [{path, message}], unchecked: Set of keywords}.
function validate(schema, value) {
  const errors = [];
  const unchecked = new Set();
  const check = (s, v, path, depth) => {
    if (depth > 64) { unchecked.add("$ref (too deep)"); return true; }
    if (s === true || s === undefined) return true;
    if (s === false) { errors.push({ path, message: "no value is allowed here (schema false)" }); return false; }
    if (!s || typeof s !== "object") return true;
    const before = errors.length;
    const fail = (message) => errors.push({ path: path || "/", message });
    for (const k of Object.keys(s)) {
      if (!CHECKED.includes(k) && !ANNOTATIONS.has(k) && !["then", "else", "if", "minContains", "maxContains"].includes(k)) {
        unchecked.add(k === "format" ? `format (${s.format})` : k);
      }
      if (k === "if") unchecked.add("if/then/else");
    }
    if (s.$ref !== undefined) {
      const target = typeof s.$ref === "string" ? resolveRef(schema, s.$ref) : undefined;
      if (target === undefined) unchecked.add(`$ref ${s.$ref}`);
      else check(target, v, path, depth + 1);
    }
    if (s.type !== undefined) {
      const types = Array.isArray(s.type) ? s.type : [s.type];
      if (!types.some((t) => hasType(v, t))) fail(`expected type ${types.join(" or ")}, got ${typeOf(v)}`);
    }
    if (Array.isArray(s.enum) && !s.enum.some((e) => canonical(e) === canonical(v))) {
      fail(`not one of the enum values ${JSON.stringify(s.enum)}`);
    }
    if ("const" in s && canonical(s.const) !== canonical(v)) fail(`not the const ${JSON.stringify(s.const)}`);
    if (typeof v === "string") {
      const n = [...v].length;
      if (typeof s.minLength === "number" && n < s.minLength) fail(`shorter than minLength ${s.minLength}`);
      if (typeof s.maxLength === "number" && n > s.maxLength) fail(`longer than maxLength ${s.maxLength}`);
      if (typeof s.pattern === "string") {
        let re = null;
        try { re = new RegExp(s.pattern, "u"); } catch (e) { unchecked.add(`pattern ${s.pattern} (not a JS regex)`); }
        if (re && !re.test(v)) fail(`does not match pattern ${s.pattern}`);
      }
    }
    if (typeof v === "number") {
      if (typeof s.minimum === "number" && v < s.minimum) fail(`below minimum ${s.minimum}`);
      if (typeof s.maximum === "number" && v > s.maximum) fail(`above maximum ${s.maximum}`);
      if (typeof s.exclusiveMinimum === "number" && v <= s.exclusiveMinimum) fail(`not above exclusiveMinimum ${s.exclusiveMinimum}`);
      if (typeof s.exclusiveMaximum === "number" && v >= s.exclusiveMaximum) fail(`not below exclusiveMaximum ${s.exclusiveMaximum}`);
      if (typeof s.multipleOf === "number" && s.multipleOf > 0) {
        const q = v / s.multipleOf;
        if (Math.abs(q - Math.round(q)) > 1e-9) fail(`not a multiple of ${s.multipleOf}`);
      }
    }
    if (Array.isArray(v)) {
      if (typeof s.minItems === "number" && v.length < s.minItems) fail(`fewer than minItems ${s.minItems}`);
      if (typeof s.maxItems === "number" && v.length > s.maxItems) fail(`more than maxItems ${s.maxItems}`);
      if (s.uniqueItems === true && new Set(v.map(canonical)).size !== v.length) fail("items are not unique");
      const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : [];
      prefix.forEach((p, i) => { if (i < v.length) check(p, v[i], `${path}/${i}`, depth + 1); });
      if (s.items !== undefined && !Array.isArray(s.items)) {
        for (let i = prefix.length; i < v.length; i++) check(s.items, v[i], `${path}/${i}`, depth + 1);
      } else if (Array.isArray(s.items)) unchecked.add("items (array form)");
      if (s.contains !== undefined) {
        const hits = v.filter((x) => quiet(s.contains, x)).length;
        const min = typeof s.minContains === "number" ? s.minContains : 1;
        if (hits < min) fail(`fewer than ${min} items match contains`);
        if (typeof s.maxContains === "number" && hits > s.maxContains) fail(`more than maxContains ${s.maxContains}`);
      }
    }
    if (v && typeof v === "object" && !Array.isArray(v)) {
      const keys = Object.keys(v);
      if (typeof s.minProperties === "number" && keys.length < s.minProperties) fail(`fewer than minProperties ${s.minProperties}`);
      if (typeof s.maxProperties === "number" && keys.length > s.maxProperties) fail(`more than maxProperties ${s.maxProperties}`);
      if (Array.isArray(s.required)) {
        for (const r of s.required) if (!(r in v)) fail(`missing required property "${r}"`);
      }
      const props = s.properties && typeof s.properties === "object" ? s.properties : {};
      const patterns = s.patternProperties && typeof s.patternProperties === "object" ? s.patternProperties : {};
      for (const k of keys) {
        const sub = `${path}/${escPtr(k)}`;
        let matched = false;
        if (k in props) { matched = true; check(props[k], v[k], sub, depth + 1); }
        for (const [p, ps] of Object.entries(patterns)) {
          let re = null;
          try { re = new RegExp(p, "u"); } catch (e) { unchecked.add(`patternProperties ${p}`); }
          if (re && re.test(k)) { matched = true; check(ps, v[k], sub, depth + 1); }
        }
        if (!matched && s.additionalProperties !== undefined) {
          if (s.additionalProperties === false) fail(`property "${k}" is not allowed (additionalProperties false)`);
          else check(s.additionalProperties, v[k], sub, depth + 1);
        }
        if (s.propertyNames !== undefined && !quiet(s.propertyNames, k)) fail(`property name "${k}" fails propertyNames`);
      }
    }
    if (Array.isArray(s.allOf)) s.allOf.forEach((sub) => check(sub, v, path, depth + 1));
    if (Array.isArray(s.anyOf) && !s.anyOf.some((sub) => quiet(sub, v))) fail("matches none of anyOf");
    if (Array.isArray(s.oneOf)) {
      const n = s.oneOf.filter((sub) => quiet(sub, v)).length;
      if (n !== 1) fail(`matches ${n} of oneOf (exactly one needed)`);
    }
    if (s.not !== undefined && quiet(s.not, v)) fail("matches the schema under not");
    return errors.length === before;
    function quiet(sub, x) {  // a trial check whose errors are dropped
      const mark = errors.length;
      const ok = check(sub, x, path, depth + 1);
      errors.length = mark;
      return ok;
    }
  };
  check(schema, value, "", 0);
  return { errors, unchecked };
}

// One line saying what was checked and how it came out.
function validationBox(schema, text, finish, label) {
  const box = el("div", { class: "validation" });
  const parsed = parseJSON(text);
  if (!parsed.ok) {
    box.classList.add("bad");
    const cut = finish === "length" ? " (cut by max_tokens: raise it)" : "";
    box.append(el("strong", { text: `✗ ${label} is not valid JSON${cut}` }), el("span", { text: `: ${parsed.error}` }));
    return { box, value: undefined };
  }
  const { errors, unchecked } = validate(schema, parsed.value);
  box.classList.add(errors.length ? "bad" : "ok");
  box.append(el("strong", {
    text: errors.length ? `✗ ${label}: ${errors.length} schema violation(s)` : `✓ ${label}: valid JSON, fits the schema`,
  }));
  if (errors.length) {
    box.append(el("ul", {}, errors.map((e) => el("li", {}, el("code", { text: e.path || "/" }), " " + e.message))));
  }
  if (unchecked.size) {
    box.append(el("p", { class: "small unchecked", text: `Not checked in the page: ${[...unchecked].join(", ")} ` +
      "(the server's enforcement report says how the grammar handles it)." }));
  }
  box.append(el("details", { class: "small" }, el("summary", { text: "What the page checks" }),
    el("p", { text: `Keywords checked here: ${CHECKED.join(", ")} (local $ref only). The grammar enforces ` +
      "EXACT keywords while the answer is written; this check runs on what arrived." })));
  return { box, value: parsed.value };
}

// ------------------------------------------------------------------ the schema view with highlights

// Pretty-printed JSON whose object keys carry data-ptr (the JSON pointer of the member).
function jsonView(value) {
  const pre = el("pre", { class: "json-view schema-view" });
  const walk = (v, ptr, ind) => {
    const pad = "  ".repeat(ind + 1);
    if (Array.isArray(v)) {
      if (!v.length) return pre.append("[]");
      pre.append("[\n");
      v.forEach((x, i) => {
        pre.append(pad);
        walk(x, `${ptr}/${i}`, ind + 1);
        pre.append(i < v.length - 1 ? ",\n" : "\n");
      });
      pre.append("  ".repeat(ind) + "]");
    } else if (v && typeof v === "object") {
      const keys = Object.keys(v);
      if (!keys.length) return pre.append("{}");
      pre.append("{\n");
      keys.forEach((k, i) => {
        pre.append(pad, el("span", { class: "key", "data-ptr": `${ptr}/${escPtr(k)}`, text: JSON.stringify(k) }), ": ");
        walk(v[k], `${ptr}/${escPtr(k)}`, ind + 1);
        pre.append(i < keys.length - 1 ? ",\n" : "\n");
      });
      pre.append("  ".repeat(ind) + "}");
    } else {
      pre.append(el("span", { class: "scalar", text: JSON.stringify(v) }));
    }
  };
  walk(value, "", 0);
  return pre;
}

const LEVEL_RANK = { EXACT: 0, ANNOTATION: 0, LOOSE: 1, REJECTED: 2 };

// The /v1/schemas/check report: per item, compiles or not, then each keyword with its pointer,
// and the schema with every reported keyword highlighted by level.
function renderReport(target, report, schemas) {
  target.replaceChildren();
  const all = report.items.flatMap((it) => it.keywords);
  const count = (level) => all.filter((k) => k.level === level).length;
  const refused = report.items.filter((it) => !it.compiles).length;
  const summary = report.ok ? "✓ Every keyword is enforced exactly (strict: true would accept it)."
    : `${count("REJECTED")} REJECTED, ${count("LOOSE")} LOOSE keyword(s)` +
      (refused ? "; the server refuses it (a request with it gets 400)." : "; it compiles, strict: true would be refused.");
  target.append(el("p", { class: "report-summary " + (report.ok ? "ok" : "bad"), text: summary }));
  report.items.forEach((item, i) => {
    const sec = el("section", { class: "report-item" });
    sec.append(el("h3", { text: item.name }));
    sec.append(el("p", { class: item.compiles ? "ok" : "bad", text: item.compiles
      ? `✓ compiles${item.cached ? " (cached)" : ""}${item.compile_seconds !== null ? `, ${(item.compile_seconds * 1000).toFixed(1)} ms` : ""}`
      : `✗ the server refuses this schema: ${item.error}` }));
    const schema = schemas[i];
    if (schema !== undefined) {
      const view = jsonView(schema);
      for (const k of item.keywords) {
        const base = k.pointer === "/" ? "" : k.pointer;
        const node = view.querySelector(`[data-ptr="${CSS.escape(base + "/" + escPtr(k.keyword))}"]`);
        if (!node) continue;
        const old = node.dataset.level;
        if (!old || LEVEL_RANK[k.level] > LEVEL_RANK[old]) {
          node.dataset.level = k.level;
          node.className = "key hl-" + k.level.toLowerCase();
          node.title = `${k.level}${k.note ? ": " + k.note : ""}`;
        }
      }
      sec.append(el("p", { class: "small muted legend" }, "Highlighted in the schema: ",
        el("span", { class: "key hl-loose", text: "LOOSE" }), " compiled, not fully enforced", "; ",
        el("span", { class: "key hl-rejected", text: "REJECTED" }), " does not compile."), view);
    }
    // Not-exact keywords first; within a level, the server's order.
    const sorted = item.keywords.map((k, j) => [k, j])
      .sort((a, b) => (LEVEL_RANK[b[0].level] - LEVEL_RANK[a[0].level]) || (a[1] - b[1])).map(([k]) => k);
    const rows = sorted.map((k) => el("tr", { class: "level-" + k.level.toLowerCase() },
      el("td", {}, el("span", { class: "level level-" + k.level.toLowerCase(), text: k.level })),
      el("td", {}, el("code", { class: "kw", text: k.keyword }), el("br"), el("code", { class: "ptr", text: k.pointer })),
      el("td", { text: k.note || "" })));
    sec.append(el("table", { class: "keywords" },
      el("caption", { class: "small muted", text: "Each keyword, at the JSON pointer of the schema that holds it" }),
      el("thead", {}, el("tr", {}, ["level", "keyword / pointer", "note"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, rows)));
    target.append(sec);
  });
}

async function runCheck(body, schemas, target) {
  target.replaceChildren(el("p", { class: "muted", text: "Checking…" }));
  let resp;
  try {
    resp = await api("/v1/schemas/check", { method: "POST", body });
  } catch (e) {
    target.replaceChildren(errorBox(0, String(e), "POST /v1/schemas/check"));
    return;
  }
  if (!resp.ok) {
    const f = await failure(resp);
    target.replaceChildren(errorBox(f.status, f.body, "POST /v1/schemas/check"));
    return;
  }
  renderReport(target, await resp.json(), schemas);
}

// ------------------------------------------------------------------ page state

const state = { messages: [], controller: null, busy: false };

function mode() { return document.querySelector('input[name="mode"]:checked').value; }

function readSchema() {
  const p = parseJSON($("schema-text").value);
  if (!p.ok || !p.value || typeof p.value !== "object" || Array.isArray(p.value)) {
    throw new Error(`The schema box must hold a JSON object${p.ok ? "" : ` (${p.error})`}.`);
  }
  return p.value;
}

function readTools() {
  const p = parseJSON($("tools-text").value);
  if (!p.ok || !Array.isArray(p.value)) {
    throw new Error(`The tools box must hold a JSON list of tools${p.ok ? "" : ` (${p.error})`}.`);
  }
  return p.value;
}

function toolNames() {
  try {
    return readTools().map((t) => t && t.function && t.function.name).filter((n) => typeof n === "string");
  } catch (e) { return []; }
}

function refreshToolChoice() {
  const sel = $("tool-choice");
  const current = sel.value || "auto";
  const opts = ["auto", "required", "none", ...toolNames().map((n) => "function:" + n)];
  sel.replaceChildren(...opts.map((o) => el("option", { value: o, text: o.startsWith("function:") ? `named: ${o.slice(9)}` : o })));
  sel.value = opts.includes(current) ? current : "auto";
}

function toolChoiceValue() {
  const v = $("tool-choice").value;
  return v.startsWith("function:") ? { type: "function", function: { name: v.slice(9) } } : v;
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
async function send(added) {
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
    const key = $("api-key").value.trim();
    if (key) localStorage.setItem(KEY_STORE, key);
    else localStorage.removeItem(KEY_STORE);
    loadModels();
  });
  $("forget-key").addEventListener("click", () => {
    localStorage.removeItem(KEY_STORE);
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
