// What a search's spec says about its parameters, for the charts' axes: each flattened parameter name
// ("optim.momentum") is either categorical (a `choice`, or a constant), with its options in the spec's
// order, or numeric, log-scaled for the loguniform kinds. Mirrors `dimensions` in
// app/search/importance.py, which the /landscape axes come from.

const KINDS = new Set(["uniform", "loguniform", "quniform", "qloguniform", "normal", "randint", "choice"]);

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function isDimension(node) {
  if (!isObject(node)) return false;
  const keys = Object.keys(node);
  return keys.length === 1 && KINDS.has(keys[0]);
}

/** The label an option is shown under: strings as they are, anything else as JSON. */
export function optionLabel(v) {
  return typeof v === "string" ? v : JSON.stringify(v);
}

/**
 * How a flattened parameter value is matched with a spec option: by label, with the type apart (8 is
 * not "8"), except that a list is its JSON text (`flatten` in dom.js turns list values into JSON).
 */
export function optionKey(v) {
  return typeof v === "string" || Array.isArray(v) ? `s:${optionLabel(v)}` : `j:${optionLabel(v)}`;
}

function merge(a, b) {
  if (!a) return b;
  if (a.kind === "categorical" && b.kind === "categorical") {
    const seen = new Set(a.options.map(optionKey));
    return { kind: "categorical", options: [...a.options, ...b.options.filter((o) => !seen.has(optionKey(o)))] };
  }
  if (a.kind === "numeric" && b.kind === "numeric") return { kind: "numeric", log: a.log && b.log };
  return { kind: "categorical", options: [] };
}

/**
 * Map of flattened parameter name -> {kind: "categorical", options: [...]} | {kind: "numeric", log}.
 * A `choice` of plain values is categorical (numbers included: `{choice: [8, 16, 32]}` has three
 * options, not a range); a choice of mappings contributes their parameters; a constant is categorical
 * with one option. Parameters a trial reports beyond the spec's are not in it.
 */
export function dimensions(space, prefix = "", out = new Map()) {
  if (!isObject(space)) return out;
  for (const [key, node] of Object.entries(space)) {
    const name = prefix ? `${prefix}.${key}` : key;
    if (isDimension(node)) {
      const [kind, args] = Object.entries(node)[0];
      if (kind === "choice" && Array.isArray(args)) {
        const plain = args.filter((o) => !isObject(o));
        const nested = args.filter((o) => isObject(o) && !isDimension(o));
        if (plain.length || !nested.length) out.set(name, { kind: "categorical", options: plain });
        for (const option of nested) {
          for (const [sub, dim] of dimensions(option, name)) out.set(sub, merge(out.get(sub), dim));
        }
      } else out.set(name, { kind: "numeric", log: kind === "loguniform" || kind === "qloguniform" });
    } else if (isObject(node)) dimensions(node, name, out);
    else out.set(name, { kind: "categorical", options: [node] });
  }
  return out;
}

/** Dotted names of the params the spec draws on a log scale (loguniform, qloguniform). */
export function logScaled(space) {
  const out = new Set();
  for (const [name, dim] of dimensions(space)) if (dim.kind === "numeric" && dim.log) out.add(name);
  return out;
}

/**
 * The categories of a categorical axis: the spec's options in its order, then any value the trials
 * hold that the spec does not list (a spec edited since, a parameter reported beyond it), sorted.
 * `values` are the trials' flattened values (undefined/null: the trial has no such parameter).
 */
export function categories(dim, values) {
  const out = dim && dim.kind === "categorical" ? [...dim.options] : [];
  const seen = new Set(out.map(optionKey));
  const extra = [];
  for (const v of values) {
    if (v === undefined || v === null) continue;
    const k = optionKey(v);
    if (!seen.has(k)) {
      seen.add(k);
      extra.push(v);
    }
  }
  extra.sort((a, b) => optionLabel(a).localeCompare(optionLabel(b), undefined, { numeric: true }));
  return [...out, ...extra];
}
