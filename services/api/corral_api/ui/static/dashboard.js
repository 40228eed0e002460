// The dashboard's only own script (no inline code: the CSP allows scripts from /ui/static alone).
// Clicks on a VM's screen image become a click at the same pixel of the guest's screen.
(function () {
  "use strict";
  function csrf() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }
  document.addEventListener("click", function (event) {
    var img = event.target;
    if (!(img instanceof HTMLImageElement) || !img.classList.contains("screen")) return;
    var rect = img.getBoundingClientRect();
    var x = Math.round((event.clientX - rect.left) * img.naturalWidth / rect.width);
    var y = Math.round((event.clientY - rect.top) * img.naturalHeight / rect.height);
    var body = new URLSearchParams({ kind: "click", x: String(x), y: String(y) });
    fetch(img.dataset.input, { method: "POST", body: body, credentials: "same-origin",
                               headers: { "X-CSRF-Token": csrf() } })
      .then(function (response) {
        var status = document.getElementById("input-status");
        if (status) status.textContent = response.ok ? "clicked at " + x + "," + y : "click refused";
      });
  });
})();
