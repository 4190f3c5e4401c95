package webui

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
)

// CookieName is the cookie that carries the access token after the first
// visit with ?token=.
const CookieName = "utpmesh_ui"

// maxForm bounds a POST body (the forms carry a few ids).
const maxForm = 64 << 10

// guard checks the access token (unless open), trades ?token= for the
// cookie, and checks the CSRF token of every POST.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
		// The stylesheet and script are no secret; the 401 page uses them.
		public := r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/static/")
		if !s.cfg.Open && !public {
			if q := r.URL.Query(); q.Has("token") {
				if !s.tokenOK(q.Get("token")) {
					s.fail(w, r, http.StatusUnauthorized, "the token in this URL is not this UI's token; copy the URL that 'utpmesh ui' printed (http://HOST:PORT/?token=…)")
					return
				}
				http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.cfg.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
				if r.Method == http.MethodGet || r.Method == http.MethodHead {
					// Drop the token from the address bar and history.
					q.Del("token")
					u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
					http.Redirect(w, r, u.String(), http.StatusSeeOther)
					return
				}
			} else if c, err := r.Cookie(CookieName); err != nil || !s.tokenOK(c.Value) {
				s.fail(w, r, http.StatusUnauthorized, "this UI needs its access token: open the URL that 'utpmesh ui' printed (http://HOST:PORT/?token=…), or restart it with --ui-token TOKEN")
				return
			}
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if err := r.ParseForm(); err != nil {
				s.fail(w, r, http.StatusBadRequest, "the form could not be read: "+err.Error())
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) != 1 {
				s.fail(w, r, http.StatusForbidden, "the form's CSRF token is missing or stale (the UI was restarted?); reload the page and press the button again")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) tokenOK(v string) bool {
	return subtle.ConstantTimeCompare([]byte(v), []byte(s.cfg.Token)) == 1
}
