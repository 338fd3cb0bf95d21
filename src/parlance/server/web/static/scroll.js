// Following a stream without fighting the reader: the list keeps to its bottom only
// while the reader is there; scrolling up stops that, and "Jump to bottom" (or
// scrolling back down) resumes it.

const NEAR_PX = 48;

export class Follower {
  constructor(list, button) {
    this.list = list;
    this.button = button;
    this.following = true;
    list.addEventListener("scroll", () => this.seen(), { passive: true });
    button.addEventListener("click", () => this.resume());
  }

  atBottom() {
    const { scrollTop, scrollHeight, clientHeight } = this.list;
    return scrollHeight - scrollTop - clientHeight <= NEAR_PX;
  }

  seen() {
    this.following = this.atBottom();
    this.button.hidden = this.following;
  }

  /** Content grew: keep to the bottom if the reader is there. */
  grew() {
    if (this.following) this.list.scrollTop = this.list.scrollHeight;
    else this.button.hidden = false;
  }

  resume() {
    this.following = true;
    this.list.scrollTop = this.list.scrollHeight;
    this.button.hidden = true;
  }
}
