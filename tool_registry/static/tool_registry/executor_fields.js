// The tool form shows the chosen executor's fields only: each executor's fieldset carries
// the class `gw-executor-<value>`; the others are hidden (their values are kept and saved).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const select = document.getElementById("id_executor");
  if (!select) return;
  const show = () => {
    document.querySelectorAll("fieldset.gw-executor").forEach((fieldset) => {
      fieldset.style.display = fieldset.classList.contains("gw-executor-" + select.value) ? "" : "none";
    });
  };
  select.addEventListener("change", show);
  show();
});
