// evalbench view: the labelling buttons. A label is sent as JSON with the page's token in the
// X-Evalbench-Token header; the server refuses anything else (another page cannot read the token).
"use strict";
(function () {
  var meta = document.querySelector('meta[name="evalbench-token"]');
  var token = meta ? meta.getAttribute("content") : "";
  document.addEventListener("click", function (event) {
    var button = event.target.closest("form.label button[data-present]");
    if (!button) { return; }
    var form = button.closest("form.label");
    var result = form.querySelector(".label-result");
    var body = {
      run: Number(form.dataset.run), case: form.dataset.case, metric: form.dataset.metric,
      present: button.dataset.present === "true", note: form.querySelector('input[name="note"]').value
    };
    result.textContent = "saving…";
    fetch("/api/labels", {
      method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-Evalbench-Token": token},
      body: JSON.stringify(body)
    }).then(function (response) {
      return response.json().then(function (data) {
        result.textContent = response.ok ? "labelled: " + data.file + " line " + data.line
                                         : "not saved: " + (data.error || response.status);
      });
    }).catch(function (err) { result.textContent = "not saved: " + err; });
  });
})();
