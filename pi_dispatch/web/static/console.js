// The console's one script: a job's output followed live over server-sent events, put in the page as text (never
// as markup: a job's output is hostile), the last 256 KiB kept. EventSource resumes by itself after a dropped
// connection, saying the last event's id (Last-Event-ID).
"use strict";
(function () {
  const KEEP = 256 * 1024;
  function follow(log) {
    const state = document.getElementById("log-state");
    const source = new EventSource(log.dataset.source);
    const say = (text) => { if (state) state.textContent = text; };
    source.addEventListener("start", (event) => {
      const fields = JSON.parse(event.data);
      say("running on " + (fields.host || "?"));
    });
    source.addEventListener("text", (event) => {
      const text = JSON.parse(event.data).text;
      log.append(document.createTextNode(text));
      if (log.textContent.length > KEEP) log.textContent = log.textContent.slice(-KEEP);
      log.scrollTop = log.scrollHeight;
    });
    source.addEventListener("end", (event) => {
      const fields = JSON.parse(event.data);
      say("ended" + (fields.exitCode !== undefined ? " with exit code " + fields.exitCode : ""));
      source.close();
    });
    source.addEventListener("unavailable", () => say("the store is not answering; retrying"));
  }
  document.addEventListener("DOMContentLoaded", () => {
    const log = document.getElementById("log");
    if (log) follow(log);
  });
})();
