// A line in the conversation where the context was compacted (`context.compacted`): older
// messages are sent to the model as a summary from here on (the transcript keeps every row).

const number = (n) => Number(n).toLocaleString("en");

/** The marker for a `context.compacted` event: an `li` for #messages (text only). */
export function compactionMarker(event) {
  const li = document.createElement("li");
  li.className = "msg note compaction";
  li.dataset.compaction = event.snapshotId || "";
  const n = event.messages;
  li.textContent = `Context compacted: ${n} message${n === 1 ? "" : "s"} summarised, `
    + `${number(event.tokensBefore)} → ${number(event.tokensAfter)} tokens`;
  return li;
}
