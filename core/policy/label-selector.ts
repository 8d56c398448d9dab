// Kubernetes label selectors: whether one selects a set of labels, and a canonical text of it, so that
// two selectors written differently but meaning the same (keys in another order, values repeated) name
// the same address set.

import type { LabelRequirement, LabelSelector } from '../policy-source';

type Labels = Readonly<Record<string, string>>;

function requirementHolds(req: LabelRequirement, labels: Labels): boolean {
  const has = Object.prototype.hasOwnProperty.call(labels, req.key);
  const value = has ? labels[req.key] : undefined;
  switch (req.operator) {
    case 'In':
      return value !== undefined && (req.values ?? []).includes(value);
    case 'NotIn':
      // A pod without the key is not "in" any of the values, so NotIn selects it (the API's meaning).
      return value === undefined || !(req.values ?? []).includes(value);
    case 'Exists':
      return has;
    case 'DoesNotExist':
      return !has;
  }
}

/** Every part must hold; an empty selector selects everything. */
export function selectorMatches(selector: LabelSelector, labels: Labels): boolean {
  for (const [key, want] of Object.entries(selector.matchLabels ?? {})) {
    if (!Object.prototype.hasOwnProperty.call(labels, key) || labels[key] !== want) return false;
  }
  for (const req of selector.matchExpressions ?? []) {
    if (!requirementHolds(req, labels)) return false;
  }
  return true;
}

// Selectors are immutable values of the model, so each one's text is worked out once.
const canonical = new WeakMap<LabelSelector, string>();

/** The same text for every spelling of the same selector. */
export function canonicalSelector(selector: LabelSelector): string {
  let text = canonical.get(selector);
  if (text === undefined) {
    text = canonicalText(selector);
    canonical.set(selector, text);
  }
  return text;
}

function canonicalText(selector: LabelSelector): string {
  const labels = Object.entries(selector.matchLabels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .sort();
  const exprs = (selector.matchExpressions ?? [])
    .map((r) => `${r.key} ${r.operator} (${[...new Set(r.values ?? [])].sort().join(',')})`)
    .sort();
  return JSON.stringify([...new Set(labels)].concat([...new Set(exprs)]));
}
