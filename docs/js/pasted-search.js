// A reader who pastes an error message into the search box should find the page that reproduces it.
// Material's query syntax reads some of such a message as operators: a word that starts with "-" is
// excluded (so "--local-rank=0" removes every result), and quotes make their words required (words that
// appear only in code, which the index leaves out). Before the query reaches the search worker, this drops
// the dashes that start a word after a first one ("--flag" becomes "flag"; "-word" still excludes) and
// the quotes. tests/test_site_browser.py pastes every error the site reproduces and checks its page
// comes first.
(function () {
  const post = Worker.prototype.postMessage;
  Worker.prototype.postMessage = function (message, ...rest) {
    if (message && typeof message.data === "string") {
      const data = message.data.replace(/"/g, " ").replace(/(^|\s)--+(?=\w)/g, "$1");
      message = Object.assign({}, message, { data: data });
    }
    return post.call(this, message, ...rest);
  };
})();
