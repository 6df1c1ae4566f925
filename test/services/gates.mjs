// In-process gates: a handler blocks inside `ctx.run` until the test releases the gate, so
// tests control exactly how long an invocation stays running without fixed sleeps.
const gates = new Map();

function slot(tag) {
  let g = gates.get(tag);
  if (!g) {
    let resolve;
    const promise = new Promise((r) => (resolve = r));
    g = { promise, resolve, entered: 0 };
    gates.set(tag, g);
  }
  return g;
}

/** Called by handlers (inside ctx.run): marks the gate entered and waits for release. */
export function waitGate(tag) {
  const g = slot(tag);
  g.entered += 1;
  return g.promise;
}

/** How many times a handler reached the gate. */
export function entered(tag) {
  return gates.get(tag)?.entered ?? 0;
}

export function release(tag, value = 'released') {
  slot(tag).resolve(value);
}
