// Copy buttons: a text to the clipboard, and a word on the button that says it went (or did not).

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // no Clipboard API (a page over http from another machine is no secure context): a selected text
    const area = document.createElement("textarea");
    area.className = "offscreen";
    area.value = text;
    area.readOnly = true;
    document.body.append(area);
    area.select();
    let done = false;
    try {
      done = document.execCommand("copy");
    } catch {
      done = false;
    }
    area.remove();
    return done;
  }
}

/** A button that copies `text()` when clicked; `what` names it ("Copy the answer"). Its word is in the
 * style sheet, so that the text of what it sits in stays that text. */
export function copyButton(what, text) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "copy";
  b.title = what;
  b.setAttribute("aria-label", what);
  b.addEventListener("click", async (ev) => {
    ev.preventDefault();
    ev.stopPropagation();
    const done = await copyText(text());
    b.classList.remove("copied", "failed");
    b.classList.add(done ? "copied" : "failed");
    setTimeout(() => b.classList.remove("copied", "failed"), 2000);
  });
  return b;
}
