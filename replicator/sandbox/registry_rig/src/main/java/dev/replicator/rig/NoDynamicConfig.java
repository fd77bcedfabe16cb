package dev.replicator.rig;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

/**
 * The list of runtime-changeable ("dynamic") settings is generated at build time by the config-index
 * Quarkus extension, whose deployment half Maven Central does not serve. Without it the registry
 * cannot start; with an empty list every setting keeps its start-up value, which is all the sandbox needs.
 */
public class NoDynamicConfig {
    @Produces
    @ApplicationScoped
    DynamicConfigPropertyList none() {
        return new DynamicConfigPropertyList(List.of());
    }
}
