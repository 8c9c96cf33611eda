// A small publish/subscribe hub. Components talk through it, never to each other directly, so
// each one can be read (and replaced) alone.
//
// Topics:
//   "run:event"       a run event (the SSE payload) of any run the page follows
//   "run:followed"    {runId, sessionKey}: the chat started following a run
//   "session:changed" {sessionKey, agentId}: the chat's session changed (null: a new one)
//   "session:open"    {sessionKey}: ask the chat to open a stored session (its history, then its
//                     live run; the sessions panel emits it when a session is clicked)
//   "session:new"     {}: ask the chat to start a new session
//   "session:agent"   {agentId}: the agent of the session the chat opened (its runs use it)
//   "panel:shown"     {panelId}: a side panel (tab) was shown
//   "agent:selected"  {agentId}: the agent new sessions use (null: the tenant's default)
//   "approvals:pending" {count}: how many tool approvals of the tenant wait (approval.js)
const handlers = new Map();

/** Call `fn(payload)` on each `emit(topic, …)`; returns a function that unsubscribes. */
export function on(topic, fn) {
  if (!handlers.has(topic)) handlers.set(topic, new Set());
  handlers.get(topic).add(fn);
  return () => handlers.get(topic).delete(fn);
}

/** Deliver `payload` to every subscriber of `topic`; one failing subscriber does not stop the rest. */
export function emit(topic, payload) {
  for (const fn of [...(handlers.get(topic) || [])]) {
    try {
      fn(payload);
    } catch (err) {
      console.warn(`bus: a "${topic}" handler failed`, err);
    }
  }
}
