// gramserve playground: the small JSON-schema checker run on answers in the page (pure, no DOM).

// What validate() checks. Anything else in a schema is listed as "not checked here".
export const CHECKED = ["type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
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

export function escPtr(s) { return String(s).replace(/~/g, "~0").replace(/\//g, "~1"); }

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
export function validate(schema, value) {
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
