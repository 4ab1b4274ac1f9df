// Claim pages: reveal an API key once (docs/claims.md). No inline handlers: everything is
// wired here. The key only ever lives in this page's memory and the read-only field.
"use strict";

(function () {
  const page = document.body.dataset.page;
  const result = document.getElementById("claim-result");
  const keyBox = document.getElementById("key-box");
  let keyUnsaved = false;

  function say(message, kind) {
    if (!result) return;
    result.textContent = message;
    result.dataset.kind = kind || "info";
  }

  async function postJson(path, body) {
    const response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
    });
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    const error = data && data.error ? data.error : null;
    const retryAfter = parseInt(response.headers.get("Retry-After") || "", 10);
    return { status: response.status, data, error, retryAfter: isNaN(retryAfter) ? null : retryAfter };
  }

  function showKey(data) {
    document.getElementById("api-key").value = data.api_key;
    document.getElementById("key-plan").textContent = data.plan;
    document.getElementById("key-project").textContent = data.project_id;
    document.getElementById("key-actor").textContent = data.actor_id;
    keyBox.hidden = false;
    keyUnsaved = true;
    say("Your key is below. Store it now: it is shown only once.", "success");
    const field = document.getElementById("api-key");
    field.focus();
    field.select();
  }

  async function copyKey() {
    const field = document.getElementById("api-key");
    const status = document.getElementById("copy-status");
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(field.value);
      } else {
        field.focus();
        field.select();
        if (!document.execCommand("copy")) throw new Error("copy refused");
      }
      keyUnsaved = false;
      status.textContent = "Copied. Paste it somewhere safe, such as a password manager or a secret store.";
    } catch (_) {
      field.focus();
      field.select();
      status.textContent = "Copying is not allowed here: the key is selected, copy it with Ctrl+C (or Cmd+C).";
    }
  }

  const copyButton = document.getElementById("copy-key");
  if (copyButton) copyButton.addEventListener("click", copyKey);
  window.addEventListener("beforeunload", function (event) {
    if (keyUnsaved) {
      event.preventDefault();
      event.returnValue = "";
    }
  });

  function describe(reply, fallback) {
    return reply.error && reply.error.message ? reply.error.message : fallback;
  }

  function sleep(seconds) {
    return new Promise(function (resolve) {
      setTimeout(resolve, seconds * 1000);
    });
  }

  // --- free claim --------------------------------------------------------------------------

  function freeClaimPage() {
    const form = document.getElementById("free-claim-form");
    if (!form) return;
    const button = document.getElementById("free-claim-button");
    const checkStatus = document.getElementById("check-status");
    let token = null;

    function resetWidget() {
      token = null;
      button.disabled = true;
      const widget = window["turnstile"];
      if (widget && typeof widget.reset === "function") {
        try {
          widget.reset("#human-check");
        } catch (_) {
          /* the widget reloads itself on the next page load */
        }
      }
    }

    // Named in the widget's data-*-callback attributes.
    window.epsHumanCheckPassed = function (value) {
      token = value;
      button.disabled = false;
      checkStatus.textContent = "Check passed. You can now ask for your key.";
    };
    window.epsHumanCheckExpired = function () {
      token = null;
      button.disabled = true;
      checkStatus.textContent = "The check expired. It refreshes by itself; wait for it to pass again.";
    };
    window.epsHumanCheckFailed = function () {
      token = null;
      button.disabled = true;
      checkStatus.textContent = "The check could not run. Reload the page and try again.";
    };

    form.addEventListener("submit", async function (event) {
      event.preventDefault();
      if (!token) {
        say("Complete the human check first.", "error");
        return;
      }
      button.disabled = true;
      say("Checking and creating your key…", "info");
      const sent = token;
      let reply;
      try {
        reply = await postJson("/v1/claim/free", { turnstile_token: sent });
      } catch (_) {
        say("The service could not be reached. Check your connection and try again.", "error");
        resetWidget();
        return;
      }
      if (reply.status === 200 && reply.data && reply.data.api_key) {
        form.hidden = true;
        showKey(reply.data);
        return;
      }
      const code = reply.error ? reply.error.code : "";
      if (reply.status === 429) {
        say(describe(reply, "This address already received a free key today (UTC). Try again tomorrow."), "error");
      } else if (reply.status === 403) {
        say("The human check did not pass. Complete it again, then ask for your key.", "error");
      } else if (reply.status === 500) {
        say("The verification service could not be reached. Nothing was used up; try again in a minute.", "error");
      } else if (reply.status === 503 || code === "not_configured") {
        say("Free keys are not available on this service.", "error");
      } else {
        say(describe(reply, "The request failed (HTTP " + reply.status + ")."), "error");
      }
      resetWidget(); // a token is good for one attempt only
    });
  }

  // --- paid claim (checkout success page) --------------------------------------------------

  const PENDING_DELAYS_S = [2, 3, 5, 8, 13, 20, 30]; // 7 tries in the first minute, under the limit

  function successPage() {
    const form = document.getElementById("claim-form");
    if (!form) return;
    const input = document.getElementById("session-id");
    const button = document.getElementById("claim-button");
    const contact = form.dataset.contact;
    let busy = false;

    async function claim(sessionId) {
      busy = true;
      button.disabled = true;
      let attempt = 0;
      try {
        for (;;) {
          let reply;
          try {
            reply = await postJson("/v1/claim", { session_id: sessionId });
          } catch (_) {
            reply = { status: 0, data: null, error: null, retryAfter: null };
          }
          const code = reply.error ? reply.error.code : "";
          if (reply.status === 200 && reply.data && reply.data.api_key) {
            form.hidden = true;
            showKey(reply.data);
            return;
          }
          if (reply.status === 409 && code === "already_claimed") {
            say(
              "The key for this purchase was already revealed, and it is never shown again. " +
                "If you lost it, do not buy again: contact " + contact +
                " with your checkout session id for a reissue (a new key for the same project).",
              "error",
            );
            return;
          }
          if (reply.status === 410) {
            say(
              "This checkout is older than the claim window (" + form.dataset.claimWindowDays +
                " days). Contact " + contact + " with your checkout session id.",
              "error",
            );
            return;
          }
          if (reply.status === 503 && code === "claim_not_ready") {
            say("Paid keys are not available on this service right now. Contact " + contact + ".", "error");
            return;
          }
          if (reply.status === 400) {
            say(describe(reply, "That is not a valid checkout session id."), "error");
            return;
          }
          const pending = code === "claim_pending" || reply.status === 0 || reply.status >= 500 || reply.status === 429;
          if (!pending || attempt >= PENDING_DELAYS_S.length) {
            say(
              pending
                ? "Your payment is still being processed. Reload this page in a few minutes; if it keeps saying this, contact " +
                    contact + " with your checkout session id."
                : describe(reply, "The request failed (HTTP " + reply.status + ")."),
              "error",
            );
            return;
          }
          let wait = PENDING_DELAYS_S[attempt];
          if (reply.status === 429 && reply.retryAfter) wait = Math.min(Math.max(wait, reply.retryAfter), 60);
          attempt += 1;
          say(
            reply.status === 0 || reply.status >= 500
              ? "The service did not answer; this page retries in " + wait + " s."
              : "Your payment is being processed; this page retries in " + wait + " s (try " + attempt + " of " +
                  PENDING_DELAYS_S.length + ").",
            "info",
          );
          await sleep(wait);
        }
      } finally {
        busy = false;
        button.disabled = false;
      }
    }

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      const value = input.value.trim();
      if (!value) {
        say("Enter your checkout session id.", "error");
        input.focus();
        return;
      }
      if (!busy) claim(value);
    });
    if (form.dataset.sessionId) claim(form.dataset.sessionId);
  }

  if (page === "claim-free") freeClaimPage();
  if (page === "claim-success") successPage();
})();
