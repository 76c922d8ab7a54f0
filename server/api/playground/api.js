// gramserve playground: the API key (kept in this origin's localStorage), the one fetch
// wrapper every request goes through, and the OpenAI error envelope shown field by field.
import { el, pretty, parseJSON } from "./dom.js";

const KEY_STORE = "gramserve.playground.apiKey";

export function apiKey() { return localStorage.getItem(KEY_STORE) || ""; }

// Saves the key for the next requests; an empty key forgets it.
export function storeKey(key) {
  if (key) localStorage.setItem(KEY_STORE, key);
  else localStorage.removeItem(KEY_STORE);
}

export function api(path, { method = "GET", body, signal } = {}) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const key = apiKey();
  if (key) headers.Authorization = "Bearer " + key;
  return fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
}

// A failed response as {status, body}: body is the parsed envelope when there is one.
export async function failure(resp) {
  const text = await resp.text();
  const parsed = parseJSON(text);
  return { status: resp.status, body: parsed.ok ? parsed.value : text };
}

// Shows an error: the OpenAI envelope {"error": {message, type, param, code}} field by field.
export function errorBox(status, body, where) {
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
