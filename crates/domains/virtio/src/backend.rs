//! The vhost-user net backend the driver domain runs for each VM vif.
