// Sluice dashboard: the few behaviours plain HTML lacks. Every page works
// without this file; it adds copy buttons, local times, confirmation of
// destructive forms, closing the settings menu and a periodic refresh of
// live regions.
(function () {
  "use strict";

  // Copy buttons: <button data-copy="element-id" hidden>, or
  // <button data-copy-value="text" hidden>. They stay hidden where scripts
  // do not run, since they could not work there.
  function copyButtons(root) {
    root.querySelectorAll("button[data-copy], button[data-copy-value]").forEach(function (btn) {
      btn.hidden = false;
      btn.addEventListener("click", function () {
        var src = btn.hasAttribute("data-copy-value") ? null : document.getElementById(btn.getAttribute("data-copy"));
        if (!src && !btn.hasAttribute("data-copy-value")) return;
        var text = src ? (src.value !== undefined ? src.value : src.textContent).trim() : btn.getAttribute("data-copy-value");
        var done = function () {
          if (!btn.hasAttribute("data-label")) btn.setAttribute("data-label", btn.textContent);
          btn.textContent = "Copied";
          btn.setAttribute("aria-live", "polite");
          setTimeout(function () { btn.textContent = btn.getAttribute("data-label"); }, 2000);
        };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(text).then(done, function () { if (src) select(src); });
        } else if (src) {
          select(src);
          try { document.execCommand("copy"); done(); } catch (e) { /* selected for manual copy */ }
        } else {
          var ta = document.createElement("textarea");
          ta.value = text;
          ta.setAttribute("readonly", "");
          ta.style.position = "fixed";
          ta.style.opacity = "0";
          document.body.appendChild(ta);
          ta.select();
          try { document.execCommand("copy"); done(); } catch (e) { /* nothing to select */ }
          document.body.removeChild(ta);
        }
      });
    });
  }
  copyButtons(document);

  // The header's settings menu closes on a click elsewhere and on Escape.
  document.addEventListener("click", function (ev) {
    document.querySelectorAll("details.nav-menu[open]").forEach(function (d) {
      if (!d.contains(ev.target)) d.open = false;
    });
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key !== "Escape") return;
    document.querySelectorAll("details.nav-menu[open]").forEach(function (d) {
      d.open = false;
      d.querySelector("summary").focus();
    });
  });

  function select(el) {
    if (el.select) { el.focus(); el.select(); return; }
    var r = document.createRange();
    r.selectNodeContents(el);
    var s = window.getSelection();
    s.removeAllRanges();
    s.addRange(r);
  }

  // Times: <time datetime="…Z" title="… UTC" data-local>… UTC</time>. The
  // server writes UTC (what readers without scripts see); here the text
  // becomes the browser's local time with its zone, and the title keeps
  // the UTC time for hovering.
  function localTimes(root) {
    root.querySelectorAll("time[data-local]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      var pad = function (n) { return (n < 10 ? "0" : "") + n; };
      var zone = "";
      try {
        var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(d);
        parts.forEach(function (p) { if (p.type === "timeZoneName") zone = " " + p.value; });
      } catch (e) { /* no zone name */ }
      el.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
        pad(d.getHours()) + ":" + pad(d.getMinutes()) + zone;
    });
  }
  localTimes(document);

  // Destructive forms: <form data-confirm="Revoke this key?">.
  document.querySelectorAll("form[data-confirm]").forEach(function (f) {
    f.addEventListener("submit", function (ev) {
      if (!window.confirm(f.getAttribute("data-confirm"))) ev.preventDefault();
    });
  });

  // Live regions: <section data-live="15" id="...">. Every N seconds the
  // page is fetched again and the region's content replaced, unless the
  // tab is hidden, the visitor turned refreshing off, or focus is inside
  // the region (replacing it would move the focus away).
  var toggle = document.querySelector("input[data-live-toggle]");
  if (toggle) {
    var wrap = toggle.closest("[hidden]");
    if (wrap) wrap.hidden = false;
  }
  document.querySelectorAll("[data-live]").forEach(function (region) {
    var every = parseInt(region.getAttribute("data-live"), 10) * 1000;
    if (!every || !region.id) return;
    setInterval(function () {
      if (document.hidden || (toggle && !toggle.checked) || region.contains(document.activeElement)) return;
      fetch(window.location.href, { credentials: "same-origin", headers: { "X-Requested-With": "refresh" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById(region.id);
          if (fresh) { region.innerHTML = fresh.innerHTML; localTimes(region); copyButtons(region); }
        })
        .catch(function () { /* keep the current content */ });
    }, every);
  });
})();
