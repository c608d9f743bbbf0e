// The queue page's charts, drawn with uPlot (vendored in static/uplot, MIT): the
// tasks finished per minute and the oldest waiting task's age, over the last hour or
// day, from /api/charts.  Read again every minute.  No inline script: the page's
// Content-Security-Policy allows this file only.
(function () {
  "use strict";
  var section = document.getElementById("charts");
  if (!section || typeof uPlot === "undefined") return;
  var choice = document.getElementById("chart-choice");
  var plots = [];

  function size(element) {
    return { width: Math.max(320, Math.min(element.clientWidth || 900, 1100)), height: 220 };
  }

  // Both charts span the window, ending with the current minute, whatever points they
  // have: left to itself, uPlot spans the points (a tenth of a second for an age chart
  // of one sample), and with none it draws no time axis or makes one up (Feb 2027 -
  // Aug 2029 was seen).
  function chart(id, series, data, span) {
    var element = document.getElementById(id);
    var options = Object.assign(size(element), {
      series: [{}].concat(series),
      axes: [{}, { size: 60 }],
      scales: { x: { time: true, auto: false, range: function () { return span; } } },
      hooks: { setScale: [function (u, key) {  // the time axis's span, for the tests
        if (key === "x") u.root.setAttribute("data-x-range", u.scales.x.min + " " + u.scales.x.max);
      }] },
    });
    var plot = new uPlot(options, data, element);
    plot.root.setAttribute("data-points", String(data[0].length));
    plots.push(plot);
  }

  function draw(answer) {
    plots.forEach(function (plot) { plot.destroy(); });
    plots = [];
    var span = [answer.times[0], answer.times[answer.times.length - 1] + 60];
    chart("throughput-chart", [
      { label: "completed", stroke: "#067647", width: 2 },
      { label: "dead", stroke: "#b42318", width: 2 },
      { label: "cancelled", stroke: "#667085", width: 1 },
    ], [answer.times, answer.completed, answer.dead, answer.cancelled], span);
    chart("age-chart", [
      { label: "oldest waiting (s)", stroke: "#2457c5", width: 2, spanGaps: false },
    ], [answer.age_times, answer.ages], span);
    section.setAttribute("data-drawn", answer.queue + "/" + answer.window);
  }

  function load() {
    var params = new URLSearchParams(new FormData(choice));
    fetch(section.getAttribute("data-api") + "?" + params.toString(), { credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error(response.status + " " + response.statusText);
        return response.json();
      })
      .then(draw)
      .catch(function (error) { section.setAttribute("data-error", String(error)); });
  }

  choice.addEventListener("change", load);
  load();
  setInterval(load, 60000);
})();
