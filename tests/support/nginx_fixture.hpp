#pragma once
// A throw-away nginx (Debian nginx-light) on a free 127.0.0.1 port, serving HTTPS with HTTP/2
// and a self-signed certificate made at start (openssl). The certificate is its own CA, so
// `ca_file()` is what a client must trust. Stopped (SIGTERM, then waited for) on destruction.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/child_guard.hpp"

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

namespace laneq::test {

inline unsigned short free_loopback_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::address_v4::loopback(), 0});
  return a.local_endpoint().port();
}

class NginxFixture {
 public:
  // `body` is what GET/POST /json answers (application/json).
  explicit NginxFixture(std::string body = R"({"ok":true})") {
    namespace fs = std::filesystem;
    dir_ = fs::temp_directory_path() / ("laneq-nginx-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(counter()++));
    // The port is found free, released, then bound by nginx: another test may take it in
    // between (nginx then exits at start), so a few tries, each on a new port.
    for (int attempt = 1;; ++attempt) {
      fs::create_directories(dir_ / "logs");
      try {
        start(body);
        return;
      } catch (...) {  // the destructor will not run: stop nginx and remove the dir here
        stop();
        if (attempt == 3) throw;
      }
    }
  }

  ~NginxFixture() { stop(); }

  NginxFixture(const NginxFixture&) = delete;
  NginxFixture& operator=(const NginxFixture&) = delete;

  unsigned short port() const { return port_; }
  std::string url(const std::string& path = "/json") const {
    return "https://localhost:" + std::to_string(port_) + path;
  }
  std::string ca_file() const { return (dir_ / "cert.pem").string(); }

 private:
  void start(const std::string& body) {
    const std::string cert = (dir_ / "cert.pem").string(), key = (dir_ / "key.pem").string();
    const std::string gen = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost"
                            " -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout '" +
                            key + "' -out '" + cert + "' >/dev/null 2>&1";
    if (std::system(gen.c_str()) != 0) throw std::runtime_error("openssl could not make a certificate");
    port_ = free_loopback_port();
    std::ofstream conf(dir_ / "nginx.conf");
    conf << "daemon off;\nmaster_process off;\nerror_log " << (dir_ / "logs/error.log").string()
         << " warn;\npid " << (dir_ / "nginx.pid").string() << ";\n"
         << "events { worker_connections 256; }\n"
         << "http {\n  access_log off;\n"
         // Every temp path in the throw-away dir: Debian's defaults (/var/lib/nginx) are root's.
         << "  client_body_temp_path " << dir_.string() << ";\n"
         << "  proxy_temp_path " << dir_.string() << ";\n  fastcgi_temp_path " << dir_.string()
         << ";\n  uwsgi_temp_path " << dir_.string() << ";\n  scgi_temp_path " << dir_.string()
         << ";\n"
         << "  server {\n    listen 127.0.0.1:" << port_ << " ssl http2;\n"
         << "    ssl_certificate " << cert << ";\n    ssl_certificate_key " << key << ";\n"
         << "    location /json { default_type application/json; return 200 '" << body
         << "'; }\n  }\n}\n";
    conf.close();
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      guard_child(parent, 0);  // (no time limit: nginx handles SIGALRM; the destructor stops it)
      const std::string c = (dir_ / "nginx.conf").string(), p = dir_.string();
      ::execlp("nginx", "nginx", "-p", p.c_str(), "-c", c.c_str(), static_cast<char*>(nullptr));
      ::execl("/usr/sbin/nginx", "nginx", "-p", p.c_str(), "-c", c.c_str(),
              static_cast<char*>(nullptr));  // root's PATH may lack /usr/sbin
      ::_exit(127);
    }
    if (pid_ < 0) throw std::runtime_error("fork failed");
    wait_ready();
  }

  void stop() noexcept {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      // nginx's master waits for its workers; one that hangs must not hang the test: 10 s,
      // then SIGKILL.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() >= until) {
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, nullptr, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a child's exit
      }
      pid_ = -1;
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  static int& counter() {
    static int n = 0;
    return n;
  }

  // Polls until nginx accepts connections (it binds within milliseconds; 10 s is generous).
  void wait_ready() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        // (its log in the message: the dir is removed with the failed fixture)
        std::ifstream log(dir_ / "logs/error.log");
        std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
        throw std::runtime_error("nginx exited at start: " + text.substr(0, 2000));
      }
      asio::io_context io;
      asio::ip::tcp::socket s(io);
      std::error_code ec;
      s.connect({asio::ip::address_v4::loopback(), port_}, ec);
      if (!ec) return;
      if (std::chrono::steady_clock::now() > give_up) throw std::runtime_error("nginx did not start");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a readiness poll, not a race fix
    }
  }

  std::filesystem::path dir_;
  unsigned short port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace laneq::test
