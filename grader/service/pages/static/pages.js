// Live updates for the service's pages: poll the page's version URL every data-poll-ms milliseconds (the
// server's LIVE_POLL_MS, grader/service/pages/__init__.py); when it moves, fetch the page again and swap in
// its parts marked data-live (the server rendered and escaped them; the filter form is outside them, so what
// an instructor types stays). No inline script: the CSP is script-src 'self'.
"use strict";
(function () {
  const body = document.body;
  const url = body.dataset.versionUrl;
  const every = Number(body.dataset.pollMs);
  if (!url || !(every > 0)) {
    return;
  }
  let current = body.dataset.version;
  let busy = false;

  async function refresh() {
    const page = await fetch(window.location.href, { credentials: "same-origin", cache: "no-store" });
    if (!page.ok) {
      return false;
    }
    const fresh = new DOMParser().parseFromString(await page.text(), "text/html");
    for (const part of document.querySelectorAll("[data-live]")) {
      const next = fresh.getElementById(part.id);
      if (next) {
        part.replaceWith(document.importNode(next, true));
      }
    }
    return true;
  }

  async function tick() {
    if (busy) {
      return;
    }
    busy = true;
    try {
      const answer = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (answer.ok) {
        const seen = (await answer.json()).version;
        if (seen !== current && (await refresh())) {
          current = seen;
          body.dataset.version = seen;
        }
      }
    } catch (error) {
      // the service is restarting or the network is away a moment: the next tick tries again
    } finally {
      busy = false;
    }
  }

  window.setInterval(tick, every);
})();
