// The sale page of flashsale-gateway (GET /sale/{sku}; docs/reference/http.md, "The sale page").
//
// A click-through is one checkout attempt: one intent id, made at the click and kept in
// localStorage (per SKU and buyer) before the buy is sent, so that a retry, a double click or
// a reload sends the same id again (the Idempotency-Key) or follows it, and never buys twice.
// Only an ended click-through (sold out, cancelled, paid, expired, refused) lets the next
// click make a new id. The page says what the gateway says: the outcome it shows is in
// #message's data-outcome, the intent id in data-intent.
//
// A sale behind a waiting room (its stock record carries "room", issue 33): the page joins the
// queue, shows the buyer's place live (the queue's event stream; its ?wait= long-poll when the
// stream fails) and, once admitted, is the Buy page, its buys carrying the admission token.
"use strict";

(function () {
	const $ = (id) => document.getElementById(id);
	const sku = decodeURIComponent(location.pathname.split("/")[2] || "");
	const skuPath = "/v1/skus/" + encodeURIComponent(sku);
	const RETRY_MAX = 8; // a buy, confirm or cancel that gets no answer is sent this often

	// What each outcome says (an outcome not listed is shown by its name).
	const TEXT = {
		posting: "Sending…",
		queued: "You're in the queue",
		sold_out: "Sold out",
		limit_exceeded: "Already bought",
		not_open: "Sale not open",
		closed: "Sale closed",
		paying: "Paying…",
		cancelling: "Cancelling…",
		confirmed: "Paid",
		confirmed_late: "Paid",
		refund_required: "Your payment could not be taken: it will be refunded",
		cancelled: "Cancelled",
		expired: "Your hold expired",
		rejected: "Refused",
		conflict: "Refused",
		error: "Something went wrong",
	};
	// The events of an intent's stream that end its hold.
	const HOLD_ENDS = ["confirmed", "confirmed_late", "refund_required", "cancelled", "expired"];

	const store = {
		get(key) {
			try {
				return localStorage.getItem(key);
			} catch (e) {
				return null; // storage off: the page still works, a reload forgets
			}
		},
		set(key, value) {
			try {
				localStorage.setItem(key, value);
			} catch (e) {
				/* as above */
			}
		},
	};

	function uuid() {
		if (crypto.randomUUID)
			return crypto.randomUUID();
		// Not a secure context (plain http on a public name): version 4 by hand.
		const b = crypto.getRandomValues(new Uint8Array(16));
		b[6] = (b[6] & 0x0f) | 0x40;
		b[8] = (b[8] & 0x3f) | 0x80;
		const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
		return [h.slice(0, 8), h.slice(8, 12), h.slice(12, 16), h.slice(16, 20), h.slice(20)].join("-");
	}

	// The buyer: ?buyer= in the address, else one made once for this browser.
	const buyer = (function () {
		const given = new URLSearchParams(location.search).get("buyer");
		if (given)
			return given;
		let b = store.get("flashsale.buyer");
		if (!b) {
			b = "web-" + uuid();
			store.set("flashsale.buyer", b);
		}
		return b;
	})();
	const slot = "flashsale.attempt." + sku + "." + buyer;
	const queuePath = skuPath + "/queue/" + encodeURIComponent(buyer);
	const admissionSlot = "flashsale.admission." + sku + "." + buyer;
	// The payment provider's checkout page, or "" (payments not set up: Pay stays disabled).
	const checkout = document.body.dataset.checkout || "";
	const POLL_WAIT_S = 2; // the queue's long-poll (the stream's fallback): a place this fresh

	// The click-through: {id, phase: "posting" | "posted" | "done", decision, outcome,
	// expires_at, source}. Saved on every change.
	let attempt = null;
	let busy = false; // a click-through is under way: Buy does nothing
	let intentEvents = null;
	let countdown = null;
	let skew = 0; // the gateway's clock minus ours, ms (from Date headers; 0 when close)
	// The waiting room: the sale is behind one (its stock record says so), and the buyer's
	// admission {token, expires_at} once admitted (kept, so that a reload buys with it).
	let room = false;
	let admission = null;
	let queueEvents = null;

	function save() {
		store.set(slot, JSON.stringify(attempt));
	}

	function load() {
		try {
			const a = JSON.parse(store.get(slot) || "null");
			return a && typeof a.id === "string" && a.phase ? a : null;
		} catch (e) {
			return null;
		}
	}

	// ---- what the page shows ----

	function show(outcome, text) {
		const m = $("message");
		m.dataset.outcome = outcome;
		m.dataset.intent = attempt ? attempt.id : "";
		m.dataset.decision = (attempt && attempt.decision) || "";
		m.dataset.source = (attempt && attempt.source) || "";
		m.textContent = text !== undefined ? text : TEXT[outcome] || outcome;
		$("intent").textContent = attempt ? " · order " + attempt.id : "";
		const holding = outcome === "held";
		$("pay").hidden = $("cancel").hidden = !holding && outcome !== "paying" && outcome !== "cancelling";
		$("pay").disabled = $("cancel").disabled = !holding;
		if (!checkout) {
			$("pay").disabled = true;
			$("pay").title = "Payments are not set up in this shop";
		}
		buyState();
		$("buy").textContent = !busy && attempt && attempt.phase === "posting" ? "Try again" : "Buy";
	}

	// Buy waits for the admission on a sale behind a waiting room.
	function buyState() {
		$("buy").disabled = busy || (room && !admission);
	}

	function mmss(ms) {
		const s = Math.max(0, Math.ceil(ms / 1000));
		return String(Math.floor(s / 60)).padStart(2, "0") + ":" + String(s % 60).padStart(2, "0");
	}

	function showHold() {
		clearInterval(countdown);
		const tick = function () {
			const left = attempt.expires_at - (Date.now() + skew);
			if (left > 0) {
				show("held", "You got one: pay within " + mmss(left));
				return;
			}
			// Out of time here; the gateway's "expired" (the log clock) ends it.
			clearInterval(countdown);
			show("expiring", TEXT.expired);
		};
		tick();
		countdown = setInterval(tick, 250);
	}

	// The click-through ended: shown, saved, and Buy makes a new one.
	function finish(outcome, text) {
		clearInterval(countdown);
		if (intentEvents) {
			intentEvents.close();
			intentEvents = null;
		}
		attempt.phase = "done";
		attempt.outcome = outcome;
		attempt.text = text;
		save();
		busy = false;
		show(outcome, text);
	}

	// ---- what the gateway says ----

	// The Date header (whole seconds): a clock more than 2 s off is corrected in the countdown.
	function clock(res) {
		const d = Date.parse(res.headers.get("Date") || "");
		if (!isNaN(d)) {
			const s = d + 500 - Date.now();
			skew = Math.abs(s) > 2000 ? s : 0;
		}
	}

	// The buy's decision (from the stream, or a 200 to the POST). An intent has one decision:
	// the same one again (a stream opened after a 200, a reconnect) changes nothing.
	function decided(d) {
		if (attempt.phase === "done" || attempt.decision || !d || !d.outcome)
			return;
		attempt.decision = d.outcome;
		if (d.outcome !== "held") {
			finish(d.outcome, d.reason ? (TEXT[d.outcome] || d.outcome) + " (" + d.reason + ")" : undefined);
			return;
		}
		attempt.expires_at = d.expires_at;
		save();
		showHold();
	}

	function holdEnded(outcome) {
		if (attempt.phase !== "done" && attempt.decision === "held")
			finish(outcome);
	}

	// The intent's stream: its decision, then what became of the hold (the stream gives what
	// already happened first, so a reload picks up where it was).
	function follow() {
		if (intentEvents)
			return;
		const id = attempt.id;
		const es = new EventSource("/v1/intents/" + id + "/events");
		intentEvents = es;
		const mine = (fn) => (e) => {
			if (attempt && attempt.id === id)
				fn(JSON.parse(e.data));
		};
		es.addEventListener("decided", mine(decided));
		for (const name of HOLD_ENDS)
			es.addEventListener(name, mine(() => holdEnded(name)));
		es.onerror = function () {
			// The browser reconnects by itself (Last-Event-ID) unless the answer was not a
			// stream (a 503): then again, later.
			if (es.readyState === EventSource.CLOSED && intentEvents === es) {
				intentEvents = null;
				setTimeout(() => attempt && attempt.id === id && attempt.phase !== "done" && follow(), 2000);
			}
		};
	}

	function wait(ms) {
		return new Promise((resolve) => setTimeout(resolve, ms));
	}

	// POST with retries on no answer, 409 (the same key in flight) and 503: [status, body], or
	// [0, {}] after RETRY_MAX tries.
	async function send(path, body, key) {
		const headers = {"Content-Type": "application/json"};
		if (key)
			headers["Idempotency-Key"] = key;
		for (let i = 0; i < RETRY_MAX; i++) {
			let res = null;
			try {
				res = await fetch(path, {method: "POST", headers, body: JSON.stringify(body), cache: "no-store"});
			} catch (e) {
				res = null; // no answer: the same request again (the key makes it safe)
			}
			if (res) {
				clock(res);
				const data = await res.json().catch(() => ({}));
				if (res.status !== 409 && res.status !== 503)
					return [res.status, data];
			}
			const after = res && Number(res.headers.get("Retry-After"));
			await wait(after > 0 ? Math.min(after, 5) * 1000 : Math.min(250 * 2 ** i, 4000));
		}
		return [0, {}];
	}

	async function buy() {
		const id = attempt.id;
		show("posting");
		const body = {buyer_id: buyer, qty: 1};
		if (admission && admission.token)
			body.token = admission.token; // the waiting room's admission
		const [status, d] = await send(skuPath + "/buys", body, id);
		if (!attempt || attempt.id !== id)
			return;
		if (status === 0) { // no answer: Buy again sends the same id
			busy = false;
			show("error", "No answer from the shop: try again");
			return;
		}
		if (status !== 200 && status !== 202) {
			finish("error", TEXT.error + " (" + (d.error || status) + ")");
			return;
		}
		attempt.phase = "posted";
		if (d.source === "edge") { // sold out at the edge: nothing was published
			attempt.source = "edge";
			decided(d);
			return;
		}
		attempt.source = "log";
		save();
		if (status === 202)
			show("queued");
		else
			decided(d);
		if (attempt.phase !== "done")
			follow();
	}

	// Pay: the buyer goes to the payment provider's page (the gateway's payment.checkout.url,
	// written into this page's data-checkout), which confirms the hold with the gateway,
	// signed, and sends the buyer back here; the intent's stream then brings "confirmed". The
	// page cannot confirm by itself: a confirm is the provider's call (issue 48).
	function pay() {
		if (!checkout)
			return;
		clearInterval(countdown);
		show("paying");
		const back = location.pathname + location.search;
		location.assign(checkout + "?intent=" + encodeURIComponent(attempt.id) + "&sku=" +
			encodeURIComponent(sku) + "&return=" + encodeURIComponent(back));
	}

	// Give the unit back (the buyer's call).
	async function endHold(kind) {
		const id = attempt.id;
		clearInterval(countdown); // the buttons stay disabled until the answer
		show(kind === "confirm" ? "paying" : "cancelling");
		const [status, d] = await send("/v1/intents/" + id + "/" + kind, {sku: sku});
		if (!attempt || attempt.id !== id || attempt.phase === "done")
			return;
		if (status === 200 && HOLD_ENDS.includes(d.outcome)) {
			holdEnded(d.outcome);
		} else if (status !== 202) {
			// Refused, or no answer: the hold is still there, and so are the buttons.
			console.warn("flashsale: " + kind + ": " + (d.error || d.outcome || "no answer"));
			showHold();
		}
		// 202: the intent's stream brings the outcome.
	}

	// ---- the waiting room (issue 33) ----

	function loadAdmission() {
		try {
			const a = JSON.parse(store.get(admissionSlot) || "null");
			return a && typeof a.token === "string" ? a : null;
		} catch (e) {
			return null;
		}
	}

	const QUEUE_TEXT = {
		joining: "Joining the queue…",
		waiting: "You're in the queue",
		undrawn: "You're in the queue: places are drawn when the sale opens",
		admitted: "It's your turn: buy now",
		error: "Could not join the queue",
	};

	// What the queue view shows: #queue's data-status is joining, waiting, admitted or error;
	// a drawn place fills #position (the buyer's number in the queue), #ahead and #wait.
	function queueShow(status, d, why) {
		const q = $("queue");
		q.hidden = false;
		q.dataset.status = status;
		const drawn = status === "waiting" && d && d.drawn;
		$("place").hidden = !drawn;
		if (drawn) {
			$("position").textContent = d.position;
			$("ahead").textContent = d.ahead;
			$("wait").textContent = d.estimated_wait_s;
		}
		const text = status === "waiting" && !drawn ? QUEUE_TEXT.undrawn : QUEUE_TEXT[status];
		$("queue-message").textContent = why ? text + " (" + why + ")" : text;
		buyState();
	}

	function queueWaiting(d) {
		if (!admission)
			queueShow("waiting", d);
	}

	function queueAdmitted(d) {
		if (queueEvents) {
			queueEvents.close();
			queueEvents = null;
		}
		admission = {token: d.token || "", expires_at: d.expires_at || 0};
		store.set(admissionSlot, JSON.stringify(admission));
		queueShow("admitted");
	}

	// The queue's stream: each change of place, then the admission. A stream that is refused
	// (not a stream: a 404 or a 503), that never opens, or that keeps failing: the long-poll.
	function followQueue() {
		if (queueEvents || admission)
			return;
		if (!window.EventSource) {
			pollQueue(false);
			return;
		}
		const es = new EventSource(queuePath + "/events");
		queueEvents = es;
		$("queue").dataset.transport = "stream";
		let opened = false;
		let errors = 0;
		es.onopen = function () {
			opened = true;
		};
		es.addEventListener("waiting", function (e) {
			errors = 0;
			queueWaiting(JSON.parse(e.data));
		});
		es.addEventListener("admitted", (e) => queueAdmitted(JSON.parse(e.data)));
		es.onerror = function () {
			errors++;
			if (queueEvents !== es)
				return;
			if (es.readyState === EventSource.CLOSED || !opened || errors >= 3) {
				es.close();
				queueEvents = null;
				pollQueue(false);
			}
		};
	}

	// The queue by GET: the first place after joining (first: the gateway says not_joined
	// until the worker decided the join; then the stream takes over), and the stream's
	// fallback (?wait=: answered at the admission, or with the place after POLL_WAIT_S).
	async function pollQueue(first) {
		if (!first)
			$("queue").dataset.transport = "poll";
		for (let i = 0; !admission;) {
			let res = null;
			try {
				res = await fetch(queuePath + (first ? "" : "?wait=" + POLL_WAIT_S), {cache: "no-store"});
			} catch (e) {
				res = null; // no answer: again, after a pause
			}
			const d = res ? await res.json().catch(() => ({})) : {};
			if (res && res.status === 200 && d.status === "admitted") {
				queueAdmitted(d);
				return;
			}
			if (res && res.status === 200 && d.status === "waiting") {
				queueWaiting(d);
				if (first) {
					followQueue();
					return;
				}
				i = 0;
				continue; // the next long-poll at once
			}
			if (res && res.status >= 400 && res.status < 500 && d.error !== "not_joined") {
				queueShow("error", null, d.error || res.status);
				return;
			}
			// Not joined yet (the join is on the log, not decided yet), 503, or no answer.
			const after = res && Number(res.headers.get("Retry-After"));
			await wait(after > 0 ? Math.min(after, 5) * 1000 : Math.min(250 * 2 ** i++, 4000));
		}
	}

	// The sale is behind a waiting room: join (again: it changes nothing), or buy with the
	// admission kept from before while it lives.
	async function joinQueue() {
		admission = loadAdmission();
		if (admission && admission.expires_at > Date.now() + skew) {
			queueShow("admitted");
			return;
		}
		admission = null;
		queueShow("joining");
		const [status, d] = await send(skuPath + "/queue", {buyer_id: buyer});
		if (status !== 202) {
			queueShow("error", null, d.error || "no answer");
			return;
		}
		pollQueue(true);
	}

	// ---- the SKU's live counter ----

	const STATUS = {open: "open", sold_out: "sold out", closed: "closed", not_open: "not open yet"};

	function counter() {
		const es = new EventSource(skuPath + "/events");
		es.addEventListener("stock", function (e) {
			const s = JSON.parse(e.data);
			$("available").textContent = s.available;
			$("supply").textContent = s.supply;
			$("status").dataset.status = s.status;
			$("status").textContent = STATUS[s.status] || s.status;
			if (s.room && !room) {
				room = true;
				joinQueue();
			}
		});
		es.onopen = function () {
			if ($("status").dataset.status === "unknown")
				$("status").textContent = "waiting for the sale";
		};
		es.onerror = function () {
			if (es.readyState === EventSource.CLOSED)
				setTimeout(counter, 2000);
		};
	}

	// ---- start ----

	$("sku").textContent = sku;
	$("buyer").textContent = buyer;
	$("buy").addEventListener("click", function () {
		// Disabled at the first click, and busy besides: a double click is one buy.
		if (busy)
			return;
		busy = true;
		$("buy").disabled = true;
		if (!attempt || attempt.phase === "done") {
			attempt = {id: uuid(), phase: "posting"};
			save(); // before it is sent: a reload from now on sends this id again
		}
		buy();
	});
	$("pay").addEventListener("click", pay);
	// Back from the provider's page without paying, the page restored as it was left: the
	// hold again (a page loaded afresh starts below).
	window.addEventListener("pageshow", function (e) {
		if (e.persisted && attempt && attempt.phase === "posted" && attempt.decision === "held")
			showHold();
	});
	$("cancel").addEventListener("click", () => endHold("cancel"));
	counter();

	admission = loadAdmission(); // a reload's buy sent again carries it
	attempt = load();
	if (!attempt) {
		show("idle", "");
	} else if (attempt.phase === "posting") {
		busy = true; // sent or not before the reload: the same id again
		buy();
	} else if (attempt.phase === "posted") {
		busy = true;
		if (attempt.decision === "held")
			showHold();
		else
			show("queued");
		follow();
	} else {
		show(attempt.outcome, attempt.text);
	}
})();
