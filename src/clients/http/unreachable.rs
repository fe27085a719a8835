//! Why a connection failed, told from a reqwest error's causes.

use rustls::CertificateError;

/// Why a connection to another system failed before any answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unreachable {
    /// The server's certificate chain does not lead to a trusted root.
    UntrustedCertificate,
    /// The server's certificate has expired (or is not valid yet).
    ExpiredCertificate,
    /// The server's certificate is for another host name.
    WrongHostName,
    /// TLS failed otherwise (protocol, alert, unusable certificate).
    Tls,
    /// Nothing listens there, or a firewall refused.
    Refused,
    /// The host name does not resolve.
    Dns,
    /// The proxy in use failed or refused the tunnel.
    Proxy,
    /// The connection failed in another way.
    Connect,
}

impl Unreachable {
    /// Classifies `err`, from a request that went through a proxy when
    /// `proxied`; `None` when the failure came after connecting (or was a
    /// timeout, which callers treat as "may have been applied").
    pub fn classify(err: &reqwest::Error, proxied: bool) -> Option<Self> {
        if err.is_timeout() || !err.is_connect() {
            return None;
        }
        let mut refused = false;
        let mut dns = false;
        let mut pending: Vec<&(dyn std::error::Error + 'static)> = vec![err];
        while let Some(cause) = pending.pop() {
            if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
                return Some(Self::of_tls(tls));
            }
            if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                refused |= io.kind() == std::io::ErrorKind::ConnectionRefused;
                // io::Error's `source` skips the error it wraps: look at it too.
                if let Some(inner) = io.get_ref() {
                    pending.push(inner);
                }
            }
            // hyper-util's connector names resolver failures this way; its
            // error type is private.
            dns |= cause.to_string().starts_with("dns error");
            if let Some(source) = cause.source() {
                pending.push(source);
            }
        }
        Some(if proxied {
            Self::Proxy
        } else if refused {
            Self::Refused
        } else if dns {
            Self::Dns
        } else {
            Self::Connect
        })
    }

    fn of_tls(err: &rustls::Error) -> Self {
        match err {
            rustls::Error::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    Self::UntrustedCertificate
                }
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => Self::ExpiredCertificate,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => Self::WrongHostName,
                _ => Self::Tls,
            },
            _ => Self::Tls,
        }
    }

    /// Whether the server's certificate was refused: trying again cannot
    /// help until the certificate or changegate's trust changes.
    pub fn is_certificate(self) -> bool {
        matches!(
            self,
            Self::UntrustedCertificate | Self::ExpiredCertificate | Self::WrongHostName
        )
    }

    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Self::UntrustedCertificate => "untrusted_certificate",
            Self::ExpiredCertificate => "expired_certificate",
            Self::WrongHostName => "wrong_host_name",
            Self::Tls => "tls",
            Self::Refused => "refused",
            Self::Dns => "dns",
            Self::Proxy => "proxy",
            Self::Connect => "connect",
        }
    }

    /// What a requester can pass on, for a system named `who` ("GitLab").
    pub fn describe(self, who: &str) -> String {
        match self {
            Self::UntrustedCertificate => format!("{who}'s certificate is not trusted"),
            Self::ExpiredCertificate => {
                format!("{who}'s certificate has expired or is not valid yet")
            }
            Self::WrongHostName => format!("{who}'s certificate is for another host name"),
            Self::Tls => format!("a secure connection to {who} could not be set up"),
            Self::Refused => format!("{who} refused the connection"),
            Self::Dns => format!("{who}'s host name cannot be resolved"),
            Self::Proxy => format!("the proxy to {who} failed"),
            Self::Connect => format!("{who} cannot be reached"),
        }
    }

    /// What the team can do about it, for the log.
    pub fn hint(self) -> &'static str {
        match self {
            Self::UntrustedCertificate => {
                "add the CA that signed it to tls.ca_file (a PEM bundle), or to the platform's store"
            }
            Self::ExpiredCertificate => "the server's certificate must be renewed",
            Self::WrongHostName => "the URL's host must be one the certificate names",
            Self::Tls => "check that the URL's port speaks TLS and the server's TLS settings",
            Self::Refused => "check the URL's host and port, and that the server is up",
            Self::Dns => "check the URL's host name and this machine's DNS",
            Self::Proxy => "check HTTPS_PROXY/HTTP_PROXY and NO_PROXY, and that the proxy is up",
            Self::Connect => "check the network between changegate and the server",
        }
    }
}
