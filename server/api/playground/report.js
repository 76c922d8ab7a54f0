// gramserve playground: the in-page validation line and the /v1/schemas/check report view.
import { el, parseJSON } from "./dom.js";
import { api, failure, errorBox } from "./api.js";
import { CHECKED, escPtr, validate } from "./validator.js";

// One line saying what was checked and how it came out.
export function validationBox(schema, text, finish, label) {
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
    // Which grammar backend enforces it exactly (docs/schema_support.md), or why none does.
    sec.append(el("p", { class: "backend " + (item.backend ? "ok" : "bad"), text: item.backend
      ? `enforced exactly by ${item.backend}` + (item.tried && item.tried.length > 1 ? ` (tried ${item.tried.join(", ")})` : "")
      : `no backend enforces it exactly: ${(item.problems || []).join("; ")}` }));
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

export async function runCheck(body, schemas, target) {
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
